# Included by CMakeLists.txt before find_package(Torch).
#
# A CUDA LibTorch 2.x's CMake config (share/cmake/Caffe2/public/cuda.cmake) looks for the NVTX 3
# headers with `find_path(nvtx3_dir NAMES nvtx3 PATHS "${PROJECT_SOURCE_DIR}/third_party/NVTX/
# c/include" NO_DEFAULT_PATH)`: inside the project being built, where a project other than
# PyTorch has none. It then falls back to the old NVTX library, `CUDA::nvToolsExt`, which CUDA
# 12.9 and newer no longer ship (headers only), and configuring fails on the missing target
# (pytorch/pytorch#152756 and downstream reports). find_path does not search again when
# `nvtx3_dir` already holds a path, so this sets it to the CUDA toolkit's own NVTX 3 headers
# when the toolkit has them. Nothing reads the variable where LibTorch has no CUDA.
#
# The toolkit is looked for as CMake's CUDA support will look for it (CUDAToolkit_ROOT, the
# CUDACXX compiler, nvcc in PATH, then CUDA_HOME, CUDA_PATH and /usr/local/cuda) without
# calling find_package(CUDAToolkit) here: its cached results, taken before LibTorch's config
# enables the CUDA language, could name another toolkit than the compiler it then finds.
if(NOT nvtx3_dir)
  set(_ckpt_nvtx_hints)
  foreach(_ckpt_root "${CUDAToolkit_ROOT}" "$ENV{CUDAToolkit_ROOT}")
    if(_ckpt_root)
      list(APPEND _ckpt_nvtx_hints "${_ckpt_root}/include")
    endif()
  endforeach()
  find_program(CKPT_NVTX_NVCC NAMES "$ENV{CUDACXX}" nvcc)
  if(CKPT_NVTX_NVCC)
    get_filename_component(_ckpt_bin "${CKPT_NVTX_NVCC}" REALPATH)
    get_filename_component(_ckpt_bin "${_ckpt_bin}" DIRECTORY)
    list(APPEND _ckpt_nvtx_hints "${_ckpt_bin}/../include")
  endif()
  unset(CKPT_NVTX_NVCC CACHE)
  foreach(_ckpt_root "$ENV{CUDA_HOME}" "$ENV{CUDA_PATH}" /usr/local/cuda)
    if(_ckpt_root)
      list(APPEND _ckpt_nvtx_hints "${_ckpt_root}/include")
    endif()
  endforeach()
  find_path(nvtx3_dir NAMES nvtx3/nvToolsExt.h PATHS ${_ckpt_nvtx_hints} NO_DEFAULT_PATH)
endif()
if(nvtx3_dir)
  message(STATUS "ckptlab: NVTX 3 headers for LibTorch's CUDA config: ${nvtx3_dir}")
endif()
