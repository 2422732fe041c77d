import os
import sys

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


# Every program XLA compiles for the CPU stays mapped while JAX caches it, a few memory mappings
# per kernel (code, unwind tables, data), and a process may hold at most vm.max_map_count
# mappings (65530 by default on Linux). One xdist worker runs hundreds of tests and compiles
# thousands of programs, enough to reach that limit, at which point LLVM cannot map the next
# program and aborts the worker. After a test, when the worker holds more than half the limit,
# JAX's caches are cleared (programs still needed are compiled again, or loaded from the
# persistent cache above); tests do not depend on what stays cached.
def _map_limit():
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):  # not Linux, or not readable: nothing to watch
        return None


def _mappings():
    with open("/proc/self/maps", "rb") as f:
        return f.read().count(b"\n")


_MAP_LIMIT = _map_limit()
_clear_above = None if _MAP_LIMIT is None else _MAP_LIMIT // 2


def pytest_runtest_teardown(item, nextitem):
    global _clear_above
    jax = sys.modules.get("jax")
    if _clear_above is None or jax is None or _mappings() <= _clear_above:
        return
    jax.clear_caches()
    # what is still mapped (programs held outside JAX's caches) is not cleared again at once
    _clear_above = max(_clear_above, _mappings() + _MAP_LIMIT // 4)
