"""Running the work: executors, memory, progress.

Owns: local process pools that turn a dead worker into an error (pool), numpy arrays in shared
memory (shared_arrays), sizes, the memory budget
and process-tree RSS (memory), progress as a bar, JSON lines or nothing (progress). Imports nothing
else of parbpe, so every stage may use it. New executors (Ray) and the run directory go here.
"""
