import os

# The suite runs on the CPU whatever accelerators the machine has.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
