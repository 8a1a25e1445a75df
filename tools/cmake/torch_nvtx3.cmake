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
if(NOT nvtx3_dir)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    find_path(nvtx3_dir NAMES nvtx3 PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
  endif()
endif()
if(nvtx3_dir)
  message(STATUS "ckptlab: NVTX 3 headers for LibTorch's CUDA config: ${nvtx3_dir}")
endif()
