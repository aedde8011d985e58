"""Running the work: executors, memory, progress, the run directory.

Owns: local process pools that turn a dead worker into an error (pool), the Ray executor
(ray_executor), numpy arrays in shared memory (shared_arrays), sizes, the memory budget and
process-tree RSS (memory), progress as a bar, JSON lines or nothing (progress), the run directory's
checkpoints and resume checks (run_dir), temporary directories (temp_dirs), small pages (pages),
threads (threads) and the tests' fault hooks (faults). Every stage may use it. It imports io (the run
directory writes atomically) and jit (a process start waits for kernels loading in a thread).

Imports: io, jit.
"""
