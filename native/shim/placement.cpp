// placement.cpp: where a model's weights go when it is spread over other hosts: the RPC
// devices of the servers given, and the MTP blocks' and the output head's tensors kept in
// local memory (drafting then never crosses the network, and a verify sends hidden rows,
// not logits rows).
#include "shim_internal.h"

#include "ggml-backend.h"
#include "gguf.h"

#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

std::string placement_rpc_devices(const char * servers, std::vector<ggml_backend_dev_t> & out) {
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    if (!rpc) {
        return "this pymtp was built without llama.cpp's RPC backend (build it with CMAKE_ARGS=-DGGML_RPC=ON)";
    }
    using add_server_fn = ggml_backend_reg_t (*)(const char * endpoint);
    auto add_server = (add_server_fn) ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server");
    if (!add_server) return "llama.cpp's RPC backend lacks ggml_backend_rpc_add_server";
    const std::string all = servers;
    size_t start = 0;
    while (start <= all.size()) {
        size_t end = all.find(',', start);
        if (end == std::string::npos) end = all.size();
        const std::string endpoint = all.substr(start, end - start);
        start = end + 1;
        if (endpoint.empty()) return "an empty RPC server in '" + all + "' (expected host:port,host:port)";
        ggml_backend_reg_t reg = nullptr;
        try {
            reg = add_server(endpoint.c_str());
        } catch (const std::exception & e) {
            return e.what();
        }
        if (!reg || ggml_backend_reg_dev_count(reg) == 0) return "RPC server " + endpoint + " offers no device";
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
            out.push_back(ggml_backend_reg_dev_get(reg, i));
        }
    }
    // local accelerators (CUDA, Metal, Vulkan builds) after the remote ones
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        const auto type = ggml_backend_dev_type(d);
        if (type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU) out.push_back(d);
    }
    return "";
}

std::string placement_mtp_pattern(const char * path) {
    gguf_init_params gp = {/*no_alloc =*/ true, /*ctx =*/ nullptr};
    std::unique_ptr<gguf_context, void (*)(gguf_context *)> g(gguf_init_from_file(path, gp), gguf_free);
    if (!g) return "";
    // an MTP block is a block with nextn.* tensors; every tensor of that block goes local
    std::set<long> blocks;
    for (int64_t i = 0; i < gguf_get_n_tensors(g.get()); ++i) {
        const std::string name = gguf_get_tensor_name(g.get(), i);
        const size_t at = name.find(".nextn.");
        if (name.rfind("blk.", 0) == 0 && at != std::string::npos) {
            blocks.insert(std::strtol(name.c_str() + 4, nullptr, 10));
        }
    }
    // the output head too (and the embedding it may be tied to): drafting and verifying both
    // read it, and a remote head sends a vocabulary-wide logits row back per verified token
    std::string pattern = "^(output\\.|output_norm\\.|token_embd\\.";
    if (!blocks.empty()) {
        pattern += "|blk\\.(";
        for (long b : blocks) pattern += (b == *blocks.begin() ? "" : "|") + std::to_string(b);
        pattern += ")\\.";
    }
    return pattern + ")";
}
