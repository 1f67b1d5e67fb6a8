# Finds what autoha builds against and says, at configure time, what is missing and how to point
# at it. The CUDA runtime and NCCL headers are the real ones (sim/ implements their prototypes, so
# the compiler checks sim/ against the ABI it stands in for); no CUDA library is linked.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

set(_autoha_header_hints)
foreach(_root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}" /usr/local/cuda)
  if(_root)
    list(APPEND _autoha_header_hints "${_root}/include")
  endif()
endforeach()

# The hints come first; then CMake's usual places (CMAKE_PREFIX_PATH, CMAKE_INCLUDE_PATH, /usr/include,
# ...), so a distribution's libnccl-dev or a CPATH-style prefix is found without a flag.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_autoha_header_hints})
if(NOT NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "nccl.h not found (looked in: ${_autoha_header_hints} and the compiler's usual paths). "
          "Install NCCL's headers or pass -DNCCL_ROOT=/path/to/nccl (the folder holding include/nccl.h).")
endif()
find_path(CUDA_INCLUDE_DIR cuda_runtime_api.h HINTS ${_autoha_header_hints})
if(NOT CUDA_INCLUDE_DIR OR NOT EXISTS "${CUDA_INCLUDE_DIR}/cuda.h")
  message(FATAL_ERROR "CUDA toolkit headers (cuda_runtime_api.h, cuda.h) not found (looked in the usual paths and: "
          "${_autoha_header_hints}). Pass -DCUDAToolkit_ROOT=/path/to/cuda.")
endif()
file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_code REGEX "#define NCCL_VERSION_CODE")
message(STATUS "NCCL headers: ${NCCL_INCLUDE_DIR} (${_nccl_code})")
message(STATUS "CUDA headers: ${CUDA_INCLUDE_DIR}")

# The real libnccl, for the tests that check errors pass through unchanged. Optional: without it
# those tests are not registered, and configure says so.
find_library(NCCL_REAL_LIBRARY NAMES libnccl.so.2 nccl HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT}
             ${CUDAToolkit_ROOT} /usr/local/cuda PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH)

find_program(NVCC_EXECUTABLE nvcc HINTS ${CUDAToolkit_ROOT}/bin /usr/local/cuda/bin)

if(AUTOHA_BUILD_TESTS)
  pkg_check_modules(CHECK REQUIRED IMPORTED_TARGET check)
endif()
find_path(UTHASH_INCLUDE_DIR uthash.h)
if(NOT UTHASH_INCLUDE_DIR)
  message(FATAL_ERROR "uthash.h not found: run scripts/install-deps (Debian package uthash-dev).")
endif()

# jansson: the distribution's. The build needs only its headers: tuner/ah_jansson.c opens
# libjansson.so.4 at run time, in a process that writes or reads a report, so libautoha.so needs
# nothing beyond the C library (tests/install checks DT_NEEDED) and nothing links -ljansson.
find_path(JANSSON_INCLUDE_DIR jansson.h)
if(NOT JANSSON_INCLUDE_DIR)
  message(FATAL_ERROR "jansson.h not found: run scripts/install-deps (Debian package libjansson-dev).")
endif()
add_library(autoha_json_headers INTERFACE)
target_include_directories(autoha_json_headers SYSTEM INTERFACE ${JANSSON_INCLUDE_DIR})
# The runtime file itself (the real file behind the libjansson.so.4 link), for the tests that
# load it by path and for the wheel's copy (AUTOHA_BUNDLE_JANSSON, cmake/Install.cmake). Optional
# otherwise: a machine that builds need not run a report.
find_library(JANSSON_RUNTIME NAMES libjansson.so.4)
if(JANSSON_RUNTIME)
  get_filename_component(JANSSON_RUNTIME_REAL ${JANSSON_RUNTIME} REALPATH)
  message(STATUS "jansson: headers ${JANSSON_INCLUDE_DIR}, runtime ${JANSSON_RUNTIME_REAL} (opened at run time)")
else()
  message(STATUS "jansson: headers ${JANSSON_INCLUDE_DIR}; no libjansson.so.4 found (Debian package libjansson4): "
          "reports will not be written until one is installed")
endif()

# The real headers, as SYSTEM includes: nccl.h declares `ncclGroupStart()` without a prototype,
# which -Wstrict-prototypes would otherwise turn into an error in every file that includes it.
add_library(autoha_cuda_headers INTERFACE)
target_include_directories(autoha_cuda_headers SYSTEM INTERFACE ${CUDA_INCLUDE_DIR} ${NCCL_INCLUDE_DIR})
