"""Simulated quantum annealing, exact in the state vector, and the effective temperature of
short (diabatic) anneals.

``H(t) = -(A(s)/2) sum_i X_i + (B(s)/2) H_P(Z)``, ``s = t / t_a``, ``A`` and ``B`` in GHz
(energy / h), ``t`` in ns; ``H_P`` the problem energy in the annealer's (dimod's) sign, which for a
SPIN model is our ``E`` up to the offset. Started in ``|+...+>``, the driver's ground state, and
measured in the computational basis. See docs/guide/diabatic.md.
"""

from ._batched import sample_traced, traced_num_steps
from ._effective import (
    EXPANSIONS,
    EffectiveBeta,
    annealing_time_for_beta,
    effective_beta,
    effective_model,
    single_effective_beta,
)
from ._evolve import (
    COUNT_BITS,
    DEFAULT_TOLERANCE,
    MAX_QUBITS,
    MAX_TABLE_N,
    MIN_STEPS,
    Evolution,
    Problem,
    check_annealing_time,
    check_order,
    default_num_steps,
    error_moments,
    evolve,
    final_state,
    output_distribution,
    prepare,
    register_to_states,
    sample_register,
    total_phase,
)
from ._schedule import (
    SCHEDULES,
    AnnealingSchedule,
    as_schedule,
    dwave_like_schedule,
    example_schedule_csv,
    linear_schedule,
    load_schedule_csv,
    save_schedule_csv,
    schedule_from_table,
)

__all__ = [
    "COUNT_BITS",
    "DEFAULT_TOLERANCE",
    "EXPANSIONS",
    "MAX_QUBITS",
    "MAX_TABLE_N",
    "MIN_STEPS",
    "SCHEDULES",
    "AnnealingSchedule",
    "EffectiveBeta",
    "Evolution",
    "Problem",
    "annealing_time_for_beta",
    "as_schedule",
    "check_annealing_time",
    "check_order",
    "default_num_steps",
    "dwave_like_schedule",
    "effective_beta",
    "effective_model",
    "error_moments",
    "evolve",
    "example_schedule_csv",
    "final_state",
    "linear_schedule",
    "load_schedule_csv",
    "output_distribution",
    "prepare",
    "register_to_states",
    "sample_register",
    "sample_traced",
    "save_schedule_csv",
    "schedule_from_table",
    "single_effective_beta",
    "total_phase",
    "traced_num_steps",
]
