import os

# The suite runs on the CPU whatever accelerators the machine has.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# JAX's persistent compilation cache is off for the suite (and, through the environment, for
# the scripts and subprocesses it starts): in three clean-clone runs of .ci/run an xdist worker
# died inside XLA's serialization of a CPU executable for the cache
# (compilation_cache.put_executable_and_time -> executable.serialize(), a segfault or abort,
# each time in a different test, never reproduced alone). Without the cache nothing is
# serialized. JAX_ENABLE_COMPILATION_CACHE set in the environment takes precedence.
os.environ.setdefault("JAX_ENABLE_COMPILATION_CACHE", "false")
