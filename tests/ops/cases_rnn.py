"""Op-table cases: recurrent ops (RNN, LSTM, GRU) and their private backward ops.

References: onnx.reference for the attributes it implements (directions, layouts, optional
inputs, linear_before_reset, RNN's Tanh and Affine); it ignores other activations, clip,
input_forget and sequence_lens, so cases using those compare against onnxruntime (which has no
layout=1). The backward ops are
checked against a vector-Jacobian product by central differences of onnx.reference's forward in
float64. Sizes stay small: gradient cases run the graph twice per input element.
"""
import numpy as np
import pytest

from tests.ops.harness import Case, rand

T, B, I, H = 3, 2, 2, 2
GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}
OUTPUTS = {"RNN": 2, "LSTM": 3, "GRU": 2}
DIRS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def rnn_inputs(op, direction="forward", layout=0, bias=True, states=True, peepholes=False,
               lens=None, seed=0, dtype=np.float32):
    """X, W, R, B, sequence_lens, initial_h[, initial_c, P] with trailing absent ones dropped."""
    d, g = DIRS[direction], GATES[op]
    x = rand(T, B, I, seed=seed, dtype=dtype)
    state = (d, B, H)
    if layout:
        x, state = x.swapaxes(0, 1).copy(), (B, d, H)
    inputs = [x, rand(d, g * H, I, seed=seed + 1, dtype=dtype),
              rand(d, g * H, H, seed=seed + 2, dtype=dtype),
              rand(d, 2 * g * H, seed=seed + 3, dtype=dtype) if bias else None,
              None if lens is None else np.asarray(lens, np.int32)]
    inputs += [rand(*state, seed=seed + 4 + k, dtype=dtype) if states else None
               for k in range(OUTPUTS[op] - 1)]
    if op == "LSTM":
        inputs.append(rand(d, 3 * H, seed=seed + 6, dtype=dtype) if peepholes else None)
    while inputs[-1] is None:
        inputs.pop()
    return inputs


def onnxruntime_reference(op, outputs):
    """Run one ``op`` node through onnxruntime (opset 22)."""
    def reference(inputs, attrs):
        ort = pytest.importorskip("onnxruntime")
        from onnx import TensorProto, helper

        names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
        outs = [f"out{j}" for j in range(outputs)]
        node = helper.make_node(op, names, outs, **attrs)
        feeds = {n: v for n, v in zip(names, inputs) if n}
        graph = helper.make_graph(
            [node], "reference",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for n, v in feeds.items()],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)],
                                  ir_version=10)
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    return reference


def n_inputs(op):
    """Number of forward inputs: X, W, R, B, sequence_lens, initial_h[, initial_c, P]."""
    return 8 if op == "LSTM" else 6


def _with_defaults(op, inputs, attrs):
    """The forward inputs with every absent optional float input as ONNX's default (zeros)."""
    inputs = list(inputs) + [None] * (n_inputs(op) - len(inputs))
    d, g = DIRS[attrs.get("direction", "forward")], GATES[op]
    batch = inputs[0].shape[1 - attrs.get("layout", 0)]
    state = (batch, d, H) if attrs.get("layout", 0) else (d, batch, H)
    shapes = {3: (d, 2 * g * H), 5: state, 6: state, 7: (d, 3 * H)}
    return [np.zeros(shapes[i], inputs[0].dtype) if v is None and i in shapes else v
            for i, v in enumerate(inputs)]


def backward_reference(op):
    """Gradients of sum(outputs * heads) w.r.t. every float input, by central differences of
    onnx.reference's forward (float64): independent of our kernels."""
    def reference(inputs, attrs):
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        n_out = OUTPUTS[op]
        forward = _with_defaults(op, inputs[:len(inputs) - n_out], attrs)
        heads = inputs[len(inputs) - n_out:]
        names = [f"in{i}" if v is not None else "" for i, v in enumerate(forward)]
        node = helper.make_node(op, names, [f"out{j}" for j in range(n_out)], **attrs)
        evaluator = ReferenceEvaluator(node)

        def objective(values):
            outs = evaluator.run(None, {n: v for n, v in zip(names, values) if n})
            return sum(float(np.sum(o * h)) for o, h in zip(outs, heads) if h is not None)

        grads, eps = [], 1e-6
        for index, value in enumerate(forward):
            if index == 4:  # sequence_lens
                continue
            grad = np.zeros_like(value)
            for k in range(value.size):
                values = [v if v is None else v.copy() for v in forward]
                values[index].reshape(-1)[k] += eps
                up = objective(values)
                values[index].reshape(-1)[k] -= 2 * eps
                grad.reshape(-1)[k] = (up - objective(values)) / (2 * eps)
            grads.append(grad)
        return grads
    return reference


def _heads(op, attrs, seed=20):
    d = DIRS[attrs.get("direction", "forward")]
    y, state = ((T, d, B, H), (d, B, H)) if not attrs.get("layout", 0) else \
        ((B, T, d, H), (B, d, H))
    return [rand(*shape, seed=seed + k, dtype=np.float64)
            for k, shape in enumerate([y] + [state] * (OUTPUTS[op] - 1))]


def _case_inputs(op, attrs, **kwargs):
    return rnn_inputs(op, direction=attrs.get("direction", "forward"),
                      layout=attrs.get("layout", 0), **kwargs)


def grad_op_case(op, name, attrs=None, **kwargs):
    attrs = {"hidden_size": H, **(attrs or {})}
    inputs = _case_inputs(op, attrs, dtype=np.float64, **kwargs)
    inputs += [None] * (n_inputs(op) - len(inputs))
    return Case(f"portable.{op}Grad", inputs + _heads(op, attrs), attrs=attrs,
                outputs=n_inputs(op) - 1, reference=backward_reference(op), rtol=1e-6,
                atol=1e-7, name=name)


def case(op, name, attrs=None, outputs=None, ort=False, **kwargs):
    attrs = {"hidden_size": H, **(attrs or {})}
    outputs = outputs or OUTPUTS[op]
    return Case(op, _case_inputs(op, attrs, **kwargs), attrs=attrs, outputs=outputs,
                reference=onnxruntime_reference(op, outputs) if ort else None, name=name)


FWD, REV, BI = ({"direction": d} for d in DIRS)
LENS = [3, 1]          # one full item, one short one
LENS0 = [2, 0]         # an empty item: zero final states

CASES = [
    # -- LSTM against onnx.reference ----------------------------------------------------------
    case("LSTM", "forward", FWD, peepholes=True),
    case("LSTM", "reverse_layout1", {**REV, "layout": 1}),
    case("LSTM", "bidirectional", BI, peepholes=True),
    case("LSTM", "bidirectional_layout1_nostates", {**BI, "layout": 1}, states=False),
    case("LSTM", "forward_layout1_nobias", {"layout": 1}, bias=False, peepholes=True),
    case("LSTM", "reverse_nostates", REV, states=False),
    case("LSTM", "Y_only", BI, outputs=1, peepholes=True),
    case("LSTM", "Y_and_Y_h", REV, outputs=2),
    # -- LSTM: attributes onnx.reference lacks, against onnxruntime --------------------------
    case("LSTM", "clip", {**BI, "clip": 0.4}, ort=True, peepholes=True),
    case("LSTM", "input_forget", {**REV, "input_forget": 1}, ort=True, peepholes=True),
    case("LSTM", "activations", {"activations": ["HardSigmoid", "LeakyRelu", "Softsign"],
                                 "activation_alpha": [0.3, 0.2], "activation_beta": [0.6]},
         ort=True),
    case("LSTM", "activations_bi", {**BI, "activations": ["Sigmoid", "Elu", "Softplus",
                                                          "Sigmoid", "Tanh", "ScaledTanh"],
                                    "activation_alpha": [0.7, 1.5], "activation_beta": [0.8]},
         ort=True),
    case("LSTM", "seq_lens", FWD, ort=True, lens=LENS, peepholes=True),
    case("LSTM", "seq_lens_reverse", REV, ort=True, lens=LENS),
    case("LSTM", "seq_lens_bi", BI, ort=True, lens=LENS, peepholes=True),
    case("LSTM", "seq_lens_zero", BI, ort=True, lens=LENS0),
    # -- GRU against onnx.reference -----------------------------------------------------------
    case("GRU", "forward", FWD),
    case("GRU", "forward_linear", {"linear_before_reset": 1}),
    case("GRU", "reverse_layout1_linear", {**REV, "layout": 1, "linear_before_reset": 1}),
    case("GRU", "bidirectional", BI),
    case("GRU", "bidirectional_layout1_nostates", {**BI, "layout": 1}, states=False),
    case("GRU", "reverse_nobias", REV, bias=False),
    case("GRU", "Y_only", {**BI, "linear_before_reset": 1}, outputs=1),
    # -- GRU against onnxruntime --------------------------------------------------------------
    case("GRU", "clip", {**BI, "clip": 0.3}, ort=True),
    case("GRU", "clip_linear", {**REV, "clip": 0.3, "linear_before_reset": 1}, ort=True),
    case("GRU", "activations", {"activations": ["Relu", "ThresholdedRelu"],
                                "activation_alpha": [0.1]}, ort=True),
    case("GRU", "activations_smooth", {**BI, "activations": ["Softsign", "Softplus",
                                                             "HardSigmoid", "Affine"],
                                       "activation_alpha": [0.3, 0.5],
                                       "activation_beta": [0.45, 0.1]}, ort=True),
    case("GRU", "seq_lens", {"linear_before_reset": 1}, ort=True, lens=LENS),
    case("GRU", "seq_lens_bi", BI, ort=True, lens=LENS),
    case("GRU", "seq_lens_zero", REV, ort=True, lens=LENS0),
    # -- RNN against onnx.reference ---------------------------------------------------------
    case("RNN", "forward", FWD),
    case("RNN", "reverse_layout1", {**REV, "layout": 1}),
    case("RNN", "bidirectional", BI),
    case("RNN", "bidirectional_layout1_nostates", {**BI, "layout": 1}, states=False),
    case("RNN", "reverse_nobias", REV, bias=False),
    case("RNN", "Y_only", BI, outputs=1),
    case("RNN", "affine", {"activations": ["Affine"], "activation_alpha": [0.7],
                           "activation_beta": [0.2]}),
    # -- RNN against onnxruntime ---------------------------------------------------------------
    case("RNN", "clip", {**BI, "clip": 0.3}, ort=True),
    case("RNN", "activations_bi", {**BI, "activations": ["Relu", "LeakyRelu"],
                                   "activation_alpha": [0.2]}, ort=True),
    case("RNN", "activations_smooth", {"activations": ["ScaledTanh"],
                                       "activation_alpha": [1.3], "activation_beta": [0.6]},
         ort=True),
    case("RNN", "seq_lens", FWD, ort=True, lens=LENS),
    case("RNN", "seq_lens_bi", BI, ort=True, lens=LENS),
    case("RNN", "seq_lens_zero", REV, ort=True, lens=LENS0),
    # -- backward ops against finite differences of onnx.reference --------------------------
    grad_op_case("RNN", "forward"),
    grad_op_case("RNN", "bidirectional_layout1", {**BI, "layout": 1}),
    grad_op_case("RNN", "reverse_nostates_nobias", REV, states=False, bias=False),
    grad_op_case("LSTM", "forward", peepholes=True),
    grad_op_case("LSTM", "bidirectional_layout1", {**BI, "layout": 1}, peepholes=True),
    grad_op_case("LSTM", "reverse_nostates", REV, states=False, bias=False),
    grad_op_case("GRU", "forward"),
    grad_op_case("GRU", "bidirectional_linear", {**BI, "linear_before_reset": 1}),
    grad_op_case("GRU", "reverse_layout1_nostates", {**REV, "layout": 1}, states=False),
]
