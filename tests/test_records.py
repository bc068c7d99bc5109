"""The epoch record (:mod:`commgraph.train.records`): built by keyword with DGS's figures as one
nested block, written to the metrics file with the flat keys its readers know."""

from __future__ import annotations

from commgraph.train.records import DGSStats, EpochRecord, StepPhases, phase_seconds

# what --metrics-out holds, in order (plot, benchmarks and docs read these keys)
KEYS = (
    "epoch loss train_acc val_acc test_acc epoch_seconds comm_wait_seconds comm_bytes halo_forward_bytes "
    "halo_backward_bytes allreduce_bytes plan plan_modeled_seconds allreduce allreduce_modeled_seconds steps "
    "steps_cap sample_seconds fetch_seconds gather_seconds forward_seconds backward_seconds optimizer_seconds "
    "feature_bytes local_bytes structure_bytes sampling_bytes sync_bytes activation_bytes "
    "activation_grad_bytes total_bytes predicted_step_seconds predicted_epoch_seconds measured_step_seconds "
    "dgs_steps dgs_masked_steps dgs_masks_age_steps dgs_wait_seconds dgs_explanations dgs_explain_seconds "
    "dgs_explain_cpu_seconds cache_hits cache_misses cache_missed_bytes cache_requested_bytes cache_disk_bytes"
).split()


def _record(**options) -> EpochRecord:
    return EpochRecord(
        epoch=3,
        loss=0.5,
        train_acc=0.9,
        val_acc=None,
        test_acc=0.75,
        epoch_seconds=0.25,
        comm_wait_seconds=0.0125,
        comm_bytes=2_000_000,
        halo_forward_bytes=[1_000_000],
        halo_backward_bytes=1_000_000,
        allreduce_bytes=4096,
        plan="p2p",
        plan_modeled_seconds=0.001,
        allreduce="native",
        allreduce_modeled_seconds=None,
        **options,
    )


def test_the_metrics_file_keeps_its_flat_keys_with_and_without_dgs():
    dgs = DGSStats(
        steps=8,
        masked_steps=6,
        masks_age_steps=4,
        wait_seconds=1.5,
        explanations=2,
        explain_seconds=3.0,
        explain_cpu_seconds=2.5,
    )
    with_dgs, without = _record(steps=4, dgs=dgs).to_dict(), _record().to_dict()
    assert tuple(with_dgs) == tuple(without) == tuple(KEYS)
    assert {k: v for k, v in with_dgs.items() if k.startswith("dgs_")} == {
        "dgs_steps": 8,
        "dgs_masked_steps": 6,
        "dgs_masks_age_steps": 4,
        "dgs_wait_seconds": 1.5,
        "dgs_explanations": 2,
        "dgs_explain_seconds": 3.0,
        "dgs_explain_cpu_seconds": 2.5,
    }
    assert all(without[k] is None for k in KEYS if k.startswith("dgs_"))
    assert with_dgs["halo_forward_bytes"] == [1_000_000] and with_dgs["val_acc"] is None


def test_the_epoch_line_reads_the_dgs_block():
    dgs = DGSStats(
        steps=8,
        masked_steps=6,
        masks_age_steps=-1,
        wait_seconds=0.0,
        explanations=0,
        explain_seconds=0.0,
        explain_cpu_seconds=0.0,
    )
    assert _record(dgs=dgs).line().endswith("   2.000 MB  masks 75% of steps")
    assert (
        _record(dgs=dgs.__class__(**{**vars(dgs), "masks_age_steps": 5, "wait_seconds": 2.0}))
        .line()
        .endswith("masks 75% of steps (age 5), waited 2.0 s")
    )
    assert _record().line().endswith("   2.000 MB")
    assert DGSStats.SUMMED == ("steps", "masked_steps", "explanations", "explain_seconds", "explain_cpu_seconds")


def test_a_sampled_steps_phases_are_flat_keys_and_none_for_full_graph():
    phases = StepPhases(fetch=0.5, gather=0.25, forward=1.0, backward=2.0, optimizer=0.125)
    sampled, full = _record(**phase_seconds(phases)).to_dict(), _record(**phase_seconds(None)).to_dict()
    assert {k: sampled[k] for k in KEYS if k in phase_seconds(None)} == {
        "fetch_seconds": 0.5,
        "gather_seconds": 0.25,
        "forward_seconds": 1.0,
        "backward_seconds": 2.0,
        "optimizer_seconds": 0.125,
    }
    assert all(full[k] is None for k in phase_seconds(None)) and tuple(full) == tuple(KEYS)
