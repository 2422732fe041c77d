import os

# Tests run on the CPU; keep XLA from grabbing every core for one test under xdist.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=true")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
