import os

# The suite runs on the CPU whatever accelerators the machine has.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Compiled programs are kept on disk (JAX's persistent compilation cache), so that a program
# compiled again — the same training step in a resumed run, the same small model in another
# test, xdist worker or script subprocess, or a later run of the suite — is loaded instead of
# compiled. Results are unchanged (the cache is keyed by the program, JAX version and flags).
# JAX_COMPILATION_CACHE_DIR set in the environment takes precedence.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.join(_ROOT, ".pytest_cache", "jax-compilation"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
