/* A stand-in library: carries one real SONAME (libcudart.so.13, libcudart.so.12, libcuda.so.1 or
 * libnccl.so.2), defines nothing, and depends on libncclsim.so, which defines every symbol.
 *
 * Why: a program whose RPATH names the real CUDA runtime or libnccl (PyTorch's wheels point at
 * $ORIGIN/../../nvidia/...) loads those from there, whatever LD_LIBRARY_PATH says, unless an object
 * with that SONAME is loaded already. ncclsim-run --preload preloads the four stand-ins, so every
 * DT_NEEDED and every dlopen of those names (RTLD_NOLOAD too) finds one of them, and every symbol
 * lookup reaches the single libncclsim.so behind them: one simulator state per process. */
typedef int sim_standin_defines_nothing;
