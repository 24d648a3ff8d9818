// placement.cpp: the devices a model spread over other hosts uses: those of the RPC servers
// given, then local accelerators. (Keeping the MTP layers and the output head local is
// llama_model_params.mtp_local, native/patches/0002.)
#include "shim_internal.h"

#include "ggml-backend.h"

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
