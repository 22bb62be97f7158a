"""Op-table cases: SwiGLU, CausalConvWithState, LinearAttention and portable.LinearAttentionGrad.

Forward cases compare against onnx.reference. Gradients of the three ONNX ops are checked
against finite differences by the table (float64). onnx.reference computes LinearAttention in
float32 whatever the input dtype, too coarse for differences in float64, so the backward op's
reference is central differences of ``spec_linear_attention`` below: a float64 transcription
of the spec's equations, written independently of our kernels.
"""
import numpy as np

from tests.ops.harness import Case, rand

# -- SwiGLU ---------------------------------------------------------------------------------------

CASES = [
    Case("SwiGLU", [rand(3, 4, low=-4, high=4), rand(3, 4, seed=1)]),
    Case("SwiGLU", [rand(2, 3, 5, low=-3, high=3), rand(2, 3, 5, seed=2)],
         attrs={"alpha": 0.5}, name="alpha"),
    Case("SwiGLU", [rand(4, 6, low=-3, high=3, dtype=np.float16),
                    rand(4, 6, seed=3, dtype=np.float16)],
         rtol=2e-3, atol=2e-3, grad=False, name="float16"),
]

# -- CausalConvWithState ----------------------------------------------------------------------


def conv_inputs(batch=2, channels=3, length=5, k=3, bias=False, past=False, seed=0,
                dtype=np.float32):
    inputs = [rand(batch, channels, length, seed=seed, dtype=dtype),
              rand(channels, 1, k, seed=seed + 1, dtype=dtype),
              rand(channels, seed=seed + 2, dtype=dtype) if bias else None,
              rand(batch, channels, k - 1, seed=seed + 3, dtype=dtype) if past else None]
    while inputs[-1] is None:
        inputs.pop()
    return inputs


CASES += [
    Case("CausalConvWithState", conv_inputs(), outputs=2, name="basic"),
    Case("CausalConvWithState", conv_inputs(bias=True), outputs=2, name="bias"),
    Case("CausalConvWithState", conv_inputs(past=True), outputs=2, name="past_state"),
    Case("CausalConvWithState", conv_inputs(bias=True, past=True, k=4), outputs=2,
         attrs={"activation": "silu"}, name="silu_bias_past"),
    Case("CausalConvWithState", conv_inputs(length=1, bias=True, past=True), outputs=2,
         attrs={"activation": "swish"}, name="decode_step_swish"),
    Case("CausalConvWithState", conv_inputs(length=2, k=5), outputs=2, name="short_input"),
    Case("CausalConvWithState", conv_inputs(k=1, bias=True), outputs=1, name="kernel_one"),
    Case("CausalConvWithState", conv_inputs(dtype=np.float16, past=True), outputs=2,
         attrs={"activation": "silu"}, rtol=2e-3, atol=2e-3, grad=False, name="float16"),
]

# -- LinearAttention -------------------------------------------------------------------------

B, T, D_K, D_V = 2, 3, 3, 2


def attention_inputs(rule="gated_delta", q_heads=2, kv_heads=2, past=False,
                     per_head_decay=False, shared_beta=False, seed=0, dtype=np.float32):
    """query, key, value, past_state, decay, beta (absent ones None, trailing dropped)."""
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    key = rand(B, T, kv_heads * D_K, seed=seed + 1, dtype=dtype)
    if delta:  # the delta rules expect unit keys (stable state): normalise per head
        heads = key.reshape(B, T, kv_heads, D_K)
        key = (heads / np.linalg.norm(heads, axis=-1, keepdims=True)).reshape(key.shape)
    inputs = [rand(B, T, q_heads * D_K, seed=seed, dtype=dtype), key.astype(dtype),
              rand(B, T, kv_heads * D_V, seed=seed + 2, dtype=dtype),
              rand(B, kv_heads, D_K, D_V, seed=seed + 3, dtype=dtype) if past else None,
              rand(B, T, kv_heads if per_head_decay else kv_heads * D_K, seed=seed + 4,
                   low=-0.5, high=-0.05, dtype=dtype) if gating else None,
              rand(B, T, 1 if shared_beta else kv_heads, seed=seed + 5, low=0.1, high=0.9,
                   dtype=dtype) if delta else None]
    while inputs[-1] is None:
        inputs.pop()
    return inputs


def attention_case(name, rule="gated_delta", q_heads=2, kv_heads=2, scale=None, **kwargs):
    attrs = {"update_rule": rule, "q_num_heads": q_heads, "kv_num_heads": kv_heads}
    if scale is not None:
        attrs["scale"] = scale
    tolerances = {"rtol": 2e-3, "atol": 2e-3} if kwargs.get("dtype") == np.float16 else {}
    return Case("LinearAttention", attention_inputs(rule, q_heads, kv_heads, **kwargs),
                attrs=attrs, outputs=2, name=name, grad=kwargs.get("dtype") != np.float16,
                **tolerances)


CASES += [
    attention_case("linear", "linear"),
    attention_case("linear_past_gqa", "linear", q_heads=4, past=True),
    attention_case("gated", "gated"),
    attention_case("gated_per_head_decay", "gated", per_head_decay=True, past=True),
    attention_case("delta", "delta"),
    attention_case("delta_shared_beta_mqa", "delta", q_heads=4, kv_heads=1, shared_beta=True),
    attention_case("gated_delta", past=True),
    attention_case("gated_delta_gqa_scale", q_heads=4, scale=0.3, per_head_decay=True),
    attention_case("gated_delta_float16", dtype=np.float16),
]

# -- portable.LinearAttentionGrad against differences of the spec ------------------------------


def spec_linear_attention(inputs, attrs):
    """The spec's recurrence, one (batch, head) matrix at a time, in float64."""
    q, k, v, past, decay, beta = (list(inputs) + [None] * 6)[:6]
    hq, hkv = attrs["q_num_heads"], attrs["kv_num_heads"]
    rule = attrs.get("update_rule", "gated_delta")
    b, t = q.shape[:2]
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    scale = attrs.get("scale") or 1 / np.sqrt(dk)
    out = np.zeros((b, t, hq * dv))
    state = np.zeros((b, hkv, dk, dv)) if past is None else np.array(past, np.float64)
    for n in range(b):
        for h in range(hkv):
            s = state[n, h]
            for i in range(t):
                kt, vt = k[n, i, h * dk:(h + 1) * dk], v[n, i, h * dv:(h + 1) * dv]
                if rule in ("gated", "gated_delta"):
                    g = decay[n, i, h] if decay.shape[2] == hkv else \
                        decay[n, i, h * dk:(h + 1) * dk]
                    s = np.exp(g).reshape(-1, 1) * s
                if rule in ("delta", "gated_delta"):
                    bt = beta[n, i, h if beta.shape[2] == hkv else 0]
                    vt = bt * (vt - s.T @ kt)
                s = s + np.outer(kt, vt)
                for qh in range(h * hq // hkv, (h + 1) * hq // hkv):
                    out[n, i, qh * dv:(qh + 1) * dv] = scale * q[n, i, qh * dk:(qh + 1) * dk] @ s
            state[n, h] = s
    return out, state


def grad_reference(inputs, attrs):
    """Gradients of sum(output * d_output) + sum(present * d_present) by central differences
    of ``spec_linear_attention``; zeros for an absent decay or beta, and for an absent
    past_state the gradient of the zero initial state."""
    forward, (dout, dpresent) = list(inputs[:6]), inputs[6:8]
    forward += [None] * (6 - len(forward))

    def objective(values):
        out, present = spec_linear_attention(values, attrs)
        total = 0.0 if dout is None else float(np.sum(out * dout))
        return total + (0.0 if dpresent is None else float(np.sum(present * dpresent)))

    b, t = forward[0].shape[:2]
    if forward[3] is None:  # the initial state's gradient is defined: that of zeros
        hkv = attrs["kv_num_heads"]
        forward[3] = np.zeros((b, hkv, forward[0].shape[2] // attrs["q_num_heads"],
                               forward[2].shape[2] // hkv))
    grads, eps = [], 1e-6
    for index, value in enumerate(forward):
        if value is None:
            grads.append(np.zeros((b, t, attrs["kv_num_heads"])))
            continue
        grad = np.zeros_like(value)
        for n in range(value.size):
            values = [x if x is None else x.copy() for x in forward]
            values[index].reshape(-1)[n] += eps
            up = objective(values)
            values[index].reshape(-1)[n] -= 2 * eps
            grad.reshape(-1)[n] = (up - objective(values)) / (2 * eps)
        grads.append(grad)
    return grads


def grad_op_case(name, rule="gated_delta", q_heads=2, kv_heads=2, heads=(True, True),
                 **kwargs):
    attrs = {"update_rule": rule, "q_num_heads": q_heads, "kv_num_heads": kv_heads}
    inputs = attention_inputs(rule, q_heads, kv_heads, dtype=np.float64, **kwargs)
    inputs += [None] * (6 - len(inputs))
    inputs += [rand(B, T, q_heads * D_V, seed=30, dtype=np.float64) if heads[0] else None,
               rand(B, kv_heads, D_K, D_V, seed=31, dtype=np.float64) if heads[1] else None]
    return Case("portable.LinearAttentionGrad", inputs, attrs=attrs, outputs=6,
                reference=grad_reference, rtol=1e-6, atol=1e-7, name=name)


CASES += [
    grad_op_case("gated_delta_past", past=True),
    grad_op_case("linear_gqa_output_only", "linear", q_heads=4, heads=(True, False)),
    grad_op_case("gated_per_head_present_only", "gated", per_head_decay=True, past=True,
                 heads=(False, True)),
    grad_op_case("delta_shared_beta", "delta", shared_beta=True),
]
