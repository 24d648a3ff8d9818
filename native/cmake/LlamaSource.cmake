# Locate the pinned llama.cpp tree, then apply native/patches.
#
# Order of preference:
#   1. the git submodule native/llama.cpp, when it is checked out;
#   2. PYMTP_LLAMA_SOURCE_DIR, a tree the user points at;
#   3. the same upstream tree shipped inside the llama-cpp-python sdist on PyPI
#      (folder vendor/llama.cpp), downloaded once, checked against its sha256 and
#      cached outside the clone, because GitHub is not always reachable.
#
# Sets PYMTP_LLAMA_DIR.

set(PYMTP_LLAMA_COMMIT "0c1e57098bba43ac29e6e3b677cdceebdd22334f")  # build b11312
set(PYMTP_SDIST_NAME   "llama_cpp_python-0.3.36")
set(PYMTP_SDIST_SHA256 "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
set(PYMTP_SDIST_URL
    "https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/${PYMTP_SDIST_NAME}.tar.gz")

set(PYMTP_LLAMA_SOURCE_DIR "" CACHE PATH "Use this llama.cpp tree instead of the submodule or the PyPI sdist")

function(_pymtp_cache_dir out)
    if(DEFINED ENV{PYMTP_CACHE_DIR})
        set(dir "$ENV{PYMTP_CACHE_DIR}")
    elseif(DEFINED ENV{XDG_CACHE_HOME})
        set(dir "$ENV{XDG_CACHE_HOME}/pymtp")
    elseif(DEFINED ENV{HOME})
        set(dir "$ENV{HOME}/.cache/pymtp")
    else()
        set(dir "${CMAKE_BINARY_DIR}/pymtp-cache")
    endif()
    set(${out} "${dir}" PARENT_SCOPE)
endfunction()

# Apply each patch once: skip it when its reverse applies (already applied),
# fail loudly when neither direction applies (the tree is not the pinned one).
function(pymtp_apply_patches tree)
    file(GLOB patches "${CMAKE_CURRENT_SOURCE_DIR}/native/patches/*.patch")
    list(SORT patches)
    if(NOT patches)
        return()
    endif()
    find_program(PYMTP_GIT git REQUIRED)
    foreach(p IN LISTS patches)
        get_filename_component(name "${p}" NAME)
        execute_process(COMMAND ${PYMTP_GIT} apply --reverse --check "${p}"
                        WORKING_DIRECTORY "${tree}" RESULT_VARIABLE already OUTPUT_QUIET ERROR_QUIET)
        if(already EQUAL 0)
            message(STATUS "pymtp: patch ${name} already applied")
            continue()
        endif()
        execute_process(COMMAND ${PYMTP_GIT} apply --whitespace=nowarn "${p}"
                        WORKING_DIRECTORY "${tree}" RESULT_VARIABLE rc ERROR_VARIABLE err)
        if(NOT rc EQUAL 0)
            message(FATAL_ERROR "pymtp: patch ${name} does not apply to ${tree}:\n${err}")
        endif()
        message(STATUS "pymtp: applied patch ${name}")
    endforeach()
endfunction()

function(_pymtp_fetch_sdist out_dir)
    _pymtp_cache_dir(cache)
    # The cached tree carries the patches, so its name depends on them.
    file(GLOB patches "${CMAKE_CURRENT_SOURCE_DIR}/native/patches/*.patch")
    list(SORT patches)
    set(patch_text "")
    foreach(p IN LISTS patches)
        file(READ "${p}" t)
        string(APPEND patch_text "${t}")
    endforeach()
    string(SHA256 patch_hash "${patch_text}")
    string(SUBSTRING "${patch_hash}" 0 12 patch_hash)
    string(SUBSTRING "${PYMTP_LLAMA_COMMIT}" 0 12 short)
    set(tree "${cache}/llama.cpp-${short}-p${patch_hash}")

    if(NOT EXISTS "${tree}/.pymtp-ready")
        set(tarball "${cache}/${PYMTP_SDIST_NAME}.tar.gz")
        if(DEFINED ENV{PYMTP_LLAMA_SDIST})
            set(tarball "$ENV{PYMTP_LLAMA_SDIST}")   # a local copy, e.g. from `pip download`
        elseif(NOT EXISTS "${tarball}")
            message(STATUS "pymtp: downloading ${PYMTP_SDIST_NAME}.tar.gz (llama.cpp ${short}) from PyPI")
            file(DOWNLOAD "${PYMTP_SDIST_URL}" "${tarball}.part" STATUS st TLS_VERIFY ON)
            list(GET st 0 code)
            if(NOT code EQUAL 0)
                list(GET st 1 msg)
                file(REMOVE "${tarball}.part")
                message(FATAL_ERROR "pymtp: could not download ${PYMTP_SDIST_URL}: ${msg}\n"
                    "Fetch it by other means and set PYMTP_LLAMA_SDIST=/path/to/${PYMTP_SDIST_NAME}.tar.gz, "
                    "or check out the submodule (git submodule update --init).")
            endif()
            file(RENAME "${tarball}.part" "${tarball}")
        endif()
        file(SHA256 "${tarball}" got)
        if(NOT got STREQUAL PYMTP_SDIST_SHA256)
            message(FATAL_ERROR "pymtp: checksum mismatch for ${tarball}\n"
                "  expected sha256 ${PYMTP_SDIST_SHA256}\n  got      sha256 ${got}\n"
                "Refusing to build from an unverified llama.cpp tree. Delete the file and retry.")
        endif()
        set(tmp "${cache}/extract-${short}")
        file(REMOVE_RECURSE "${tmp}" "${tree}")
        message(STATUS "pymtp: extracting vendor/llama.cpp into ${tree}")
        file(ARCHIVE_EXTRACT INPUT "${tarball}" DESTINATION "${tmp}"
             PATTERNS "${PYMTP_SDIST_NAME}/vendor/llama.cpp/*")
        file(RENAME "${tmp}/${PYMTP_SDIST_NAME}/vendor/llama.cpp" "${tree}")
        # The sdist keeps the submodule's .git pointer file, which leads nowhere here.
        file(REMOVE "${tree}/.git")
        file(REMOVE_RECURSE "${tmp}")
        pymtp_apply_patches("${tree}")
        file(WRITE "${tree}/.pymtp-ready" "${PYMTP_LLAMA_COMMIT}\n")
    endif()
    set(${out_dir} "${tree}" PARENT_SCOPE)
endfunction()

if(PYMTP_LLAMA_SOURCE_DIR)
    set(PYMTP_LLAMA_DIR "${PYMTP_LLAMA_SOURCE_DIR}")
    pymtp_apply_patches("${PYMTP_LLAMA_DIR}")
elseif(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/native/llama.cpp/CMakeLists.txt")
    set(PYMTP_LLAMA_DIR "${CMAKE_CURRENT_SOURCE_DIR}/native/llama.cpp")
    pymtp_apply_patches("${PYMTP_LLAMA_DIR}")
else()
    _pymtp_fetch_sdist(PYMTP_LLAMA_DIR)
endif()
message(STATUS "pymtp: llama.cpp source: ${PYMTP_LLAMA_DIR}")
