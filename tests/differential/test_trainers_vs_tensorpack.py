"""SimpleTrainer and SyncMultiGPUTrainerReplicated against tensorpack 0.11's over the first steps of
small ModelDescs (``trainer_cases``): the cost of each step and every model variable after the
last, to 1e-5, from the same initial weights (tensorpack's, loaded by name) on the same batches,
with the learning rate following ScheduledHyperParamSetter / HyperParamSetterWithFunc.

The replicated case runs tensorpack's SyncMultiGPUTrainerReplicated(2, mode='cpu') on two CPU
"towers" and kerastrainer's on two logical CPU devices. Which tower takes which batch is not fixed
in either (two dequeues of one queue), so it compares what does not depend on it: the towers'
mean cost and the trainable weights (averaged gradients); each tower's moving statistics follow its
own batch, and are compared in the one-tower cases only.
"""
import json
import types

import numpy as np
import pytest

from oracle import require_oracle, run_oracle
from trainer_cases import CASES, EPOCHS, STEPS_PER_EPOCH, make_batches, make_callbacks, make_model

TOL = dict(rtol=1e-5, atol=1e-5)
FAST = ["convnet_simple_linear", "convnet_replicated_linear"]


_ORACLE = {}


def oracle_for(name, tmp_path_factory):
    """The oracle's outputs for the group (fast or slow) of case ``name``: one oracle process per group."""
    require_oracle()
    group = name in FAST
    if group not in _ORACLE:
        cases = [n for n in CASES if (n in FAST) == group]
        inputs = {"cases": np.array(json.dumps(cases))}
        for n in cases:
            model, _, towers, _ = CASES[n]
            batches = make_batches(model, towers)
            inputs[f"{n}/nbatches"] = np.array(len(batches))
            for i, (x, y) in enumerate(batches):
                inputs[f"{n}/batch{i}/0"], inputs[f"{n}/batch{i}/1"] = x, y
        _ORACLE[group] = run_oracle("trainer", inputs, tmp_path_factory.mktemp("oracle_trainer"))
    return _ORACLE[group]


def oracle_case(out, name):
    if f"{name}/error" in out:
        pytest.fail(f"tensorpack 0.11 failed on case {name}:\n{out[f'{name}/error']}")
    pick = lambda kind: {k.split(f"/{kind}/", 1)[1]: v for k, v in out.items()  # noqa: E731
                         if k.startswith(f"{name}/{kind}/")}
    return out[f"{name}/cost"], pick("init"), pick("final")


def is_model_variable(name):
    """The model's variables (tensorpack's optimizer slots, counter and rate are named otherwise)."""
    return not (name.endswith("/Momentum") or name in ("global_step", "learning_rate"))


def run_kerastrainer(name, init):
    import kerastrainer as kt
    from kerastrainer.models import l2_regularizer, regularize_cost
    model_name, schedule, towers, trainer_name = CASES[name]
    F = types.SimpleNamespace(**{**{k: getattr(kt, k) for k in dir(kt) if not k.startswith("_")},
                                 "l2_regularizer": l2_regularizer, "regularize_cost": regularize_cost})
    costs = []
    config = kt.TrainConfig(
        model=make_model(F, kt.tfv1, model_name),
        dataflow=kt.DataFromList(make_batches(model_name, towers), shuffle=False),
        callbacks=make_callbacks(F, schedule) + [kt.ProcessTensors(["cost"], lambda c: costs.append(float(c)))],
        session_init=kt.DictRestore({k: v for k, v in init.items() if is_model_variable(k)}),
        steps_per_epoch=STEPS_PER_EPOCH, max_epoch=EPOCHS)
    # the program's own NCHW depthwise convolution has a CPU kernel only under XLA (or oneDNN)
    xla = dict(jit_compile=True) if model_name == "shufflenet" else {}
    trainer = kt.SimpleTrainer(**xla) if trainer_name == "SimpleTrainer" else getattr(kt, trainer_name)(towers, **xla)
    kt.launch_train_with_config(config, trainer)
    return np.array(costs), {k: v.numpy() for k, v in trainer.named_variables().items() if is_model_variable(k)}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in FAST else pytest.mark.slow) for n in CASES])
def test_first_steps_match_tensorpack(name, tmp_path_factory):
    ref_costs, init, ref_final = oracle_case(oracle_for(name, tmp_path_factory), name)
    costs, final = run_kerastrainer(name, init)
    ref_final = {k: v for k, v in ref_final.items() if is_model_variable(k)}
    assert set(final) == set(ref_final), f"variables: kerastrainer {sorted(final)}, tensorpack {sorted(ref_final)}"
    np.testing.assert_allclose(costs, ref_costs, **TOL, err_msg=f"{name}: the cost of each step")
    towers = CASES[name][2]
    for k in sorted(ref_final):
        if towers > 1 and ("/EMA" in k):
            continue   # each tower's moving statistics follow the batch it happened to take
        np.testing.assert_allclose(final[k], ref_final[k], **TOL, err_msg=f"{name}: {k} after the last step")
