"""helpers.workload.predict: one batch-wise predict and one accuracy for modules, graphs, Runners, functions."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import images, tiny_classifier

from helpers.workload import predict


def test_torch_module_batches_in_eval_mode_and_restores_it(torch_mod):
    torch_mod.manual_seed(0)
    model = tiny_classifier().train()
    x = images(7)
    with torch_mod.no_grad():
        want = model.eval()(torch_mod.from_numpy(x)).numpy()
    model.train()
    got = predict.predict_batched(model, x, batch_size=3)  # 3 + 3 + 1
    # BatchNorm uses its running statistics (eval mode), whatever the batch split
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert got.dtype == np.float32 and model.training  # training mode restored
    assert predict.predict_batched(model, torch_mod.from_numpy(x)).shape == (7, 4)  # tensor input
    assert predict.model_device(model).type == "cpu"


def test_float64_model_gets_float64_inputs(torch_mod):
    model = tiny_classifier().double().eval()
    out = predict.predict_batched(model, images(2))
    assert out.dtype == np.float64


def test_functions_and_runner_like_callables():
    logits = np.eye(4, dtype=np.float32)[[0, 1, 2, 3, 0]]
    fn = lambda b: logits[: len(b)]  # noqa: E731
    x = np.zeros((5, 1), np.float32)
    assert predict.accuracy(fn, x, [0, 1, 2, 3, 0], batch_size=5) == 1.0
    assert predict.accuracy(fn, x, [0, 1, 2, 3, 1], batch_size=None) == pytest.approx(0.8)
    assert predict.predict_classes(fn, x, batch_size=5).tolist() == [0, 1, 2, 3, 0]
    calls = []

    class FakeRunner:  # a Runner is a callable NumPy -> NumPy
        def __call__(self, batch):
            calls.append(len(batch))
            return np.ones((len(batch), 2), np.float32)

    assert predict.predict_batched(FakeRunner(), x, batch_size=2).shape == (5, 2)
    assert calls == [2, 2, 1]


def test_onnx_runtime_runner(torch_mod, tmp_path):
    from helpers.deploy import export, runtimes

    torch_mod.manual_seed(0)
    model = tiny_classifier().eval()
    x = images(5)
    path = export.export_onnx(model, torch_mod.from_numpy(x[:2]), tmp_path / "m.onnx").path
    runner = runtimes.create_session(path, "cpu", verbose=False)
    np.testing.assert_allclose(
        predict.predict_batched(runner, x, 2), predict.predict_batched(model, x), atol=1e-5
    )


def test_bad_inputs_are_clear_errors(torch_mod):
    fn = lambda b: np.zeros((len(b), 3))  # noqa: E731
    x = images(6)
    with pytest.raises(ValueError, match="6 inputs but 5 labels"):
        predict.accuracy(fn, x, np.zeros(5, np.int64))
    with pytest.raises(ValueError, match="1-D"):
        predict.accuracy(fn, x, np.zeros((6, 2)))
    with pytest.raises(ValueError, match="batch_size"):
        predict.predict_batched(fn, x, batch_size=0)
    with pytest.raises(ValueError, match="non-empty"):
        predict.predict_batched(fn, x[:0])
    with pytest.raises(TypeError, match="cannot predict"):
        predict.predict_batched(42, x)
    with pytest.raises(TypeError, match="single output tensor"):
        predict.predict_batched(lambda b: None, x)
    with pytest.raises(TypeError, match="returned a tuple"):
        predict.predict_batched(lambda b: (b, b), x)
    with pytest.raises(ValueError, match="logits"):
        predict.predict_classes(lambda b: np.zeros(len(b)), x)


def test_oneflow_module_and_graph(flow):
    from helpers.compiling import graphs

    flow.manual_seed(0)
    model = tiny_classifier("oneflow").train()
    x = images(4)
    got = predict.predict_batched(model, x, batch_size=2)
    assert model.training and got.shape == (4, 4)
    model.eval()
    with flow.no_grad():
        want = model(flow.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    graph = graphs.InferenceGraph(model)
    np.testing.assert_allclose(predict.predict_batched(graph, x, 2), want, rtol=1e-5, atol=1e-6)
    assert predict.model_device(graph).type == "cpu"
