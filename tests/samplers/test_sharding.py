"""A batch of models split over devices: every sampler that runs in JAX gives the one-device
draws, leaves them split the same way, and the programs it compiles hold no collective (no
gather, reduction or exchange between devices: each device runs its own models' chains). Dense,
lattice and chain batches, couplings shared by the batch, and a mesh of Explicit axes (what
``jax.make_mesh`` makes by default). Runs in a subprocess with 2 host CPU devices
(``--xla_force_host_platform_device_count``, which must be set before JAX starts), XLA's
optimized programs dumped as text to look for collectives, and the persistent compilation cache
off (a program loaded from it is not dumped)."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import glob, os, shutil, sys
    dump = sys.argv[1]
    os.environ["XLA_FLAGS"] = ("--xla_force_host_platform_device_count=2 "
                               f"--xla_dump_to={dump} --xla_dump_hlo_as_text")
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from isingattn import IsingModel
    from isingattn.models import chain, random_dense, square_lattice
    from isingattn.samplers import get_sampler

    assert jax.device_count() == 2
    mesh = jax.make_mesh((2,), ("data",))  # Explicit axes
    B = 4
    rng = np.random.default_rng(0)

    def split(model):  # the batched arrays split along the batch, shared ones replicated
        return jax.tree.map(lambda x: jax.device_put(x, NamedSharding(
            mesh, P("data") if np.ndim(x) and np.shape(x)[0] == B else P())), model)

    dense = random_dense(jax.random.key(0), 6, batch_shape=(B,), beta=0.6)
    shared_J = IsingModel(rng.normal(size=(B, 6)).astype(np.float32), dense.J[0], beta=0.6)
    lattice = square_lattice(3, J=rng.normal(1.0, 0.3, (B, 18)).astype(np.float32), beta=0.4)
    line = chain(7, J=rng.normal(size=(B, 6)).astype(np.float32),
                 h=rng.normal(size=(B, 7)).astype(np.float32), beta=0.8)
    # (the MCMC samplers share one driver: Gibbs and Swendsen-Wang stand for the others)
    cases = [("exact", dense), ("simulated_annealing", dense), ("gibbs", shared_J),
             ("simulated_annealing", shared_J), ("swendsen_wang", lattice), ("transfer", line)]
    options = {"simulated_annealing": {"num_sweeps": 20}}
    for i, (name, model) in enumerate(cases):
        sampler = get_sampler(name)
        opts = options.get(name, {})
        one = sampler.sample(model, jax.random.key(i), 3, num_chains=2, **opts)
        shutil.rmtree(dump, ignore_errors=True)
        two = sampler.sample(split(model), jax.random.key(i), 3, num_chains=2, **opts)
        what = f"{name} on {type(model).__name__} J{tuple(model.J.shape)}"
        np.testing.assert_array_equal(np.asarray(two.spins), np.asarray(one.spins),
                                      err_msg=what)
        np.testing.assert_allclose(np.asarray(two.energy), np.asarray(one.energy),
                                   rtol=1e-6, err_msg=what)
        spec = two.spins.sharding.spec
        assert tuple(spec)[:1] == ("data",), (what, spec)
        programs = glob.glob(os.path.join(dump, "*after_optimizations.txt"))
        assert programs, what  # the split call compiled its own programs
        for p in programs:
            text = open(p).read()
            for op in ("all-gather", "all-reduce", "all-to-all", "collective-permute",
                       "reduce-scatter"):
                assert f" {op}(" not in text and f" {op}-start(" not in text, (
                    what, os.path.basename(p), op)
        print(what, "ok", flush=True)
''')


def test_split_batches_sample_locally_and_equal_one_device(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "dump")],
                          check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.count(" ok") == 6, proc.stdout
