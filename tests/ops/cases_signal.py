"""Op-table cases: DFT, STFT, the windows and MelWeightMatrix (against onnx.reference; DFT's
and STFT's gradients, adjoint DFTs, against finite differences)."""
import numpy as np

from tests.ops.harness import Case, rand


def i64(value):
    return np.asarray(value, np.int64)


CASES = [
    # complex input, full spectrum along axis 1 of (batch, signal, components)
    Case("DFT", [rand(2, 5, 2), None, i64(1)], const=(2,)),
    Case("DFT", [rand(3, 6, 1)], name="real_default_axis"),
    Case("DFT", [rand(2, 7, 1), None, i64(1)], const=(2,), attrs={"onesided": 1},
         name="rfft_odd"),
    Case("DFT", [rand(2, 5, 1), i64(8), i64(-2)], const=(1, 2), attrs={"onesided": 1},
         name="rfft_padded"),
    Case("DFT", [rand(6, 2, 2), i64(4), i64(0)], const=(1, 2), name="cut_first_axis"),
    Case("DFT", [rand(2, 4, 3, 2), None, i64(1)], const=(2,), attrs={"inverse": 1},
         name="inverse_inner_axes"),
    Case("DFT", [rand(2, 5, 2), i64(7), i64(1)], const=(1, 2), attrs={"inverse": 1},
         name="inverse_padded"),
    Case("DFT", [rand(2, 4, 2), None, i64(1)], const=(2,),
         attrs={"inverse": 1, "onesided": 1}, name="irfft_even"),
    Case("DFT", [rand(3, 4, 2), i64(7), i64(1)], const=(1, 2),
         attrs={"inverse": 1, "onesided": 1}, name="irfft_odd_length"),
    Case("DFT", [rand(2, 6, 2), i64(5), i64(1)], const=(1, 2),
         attrs={"inverse": 1, "onesided": 1}, name="irfft_cut"),
    Case("DFT", [rand(2, 5, 1, dtype=np.float64), None, i64(1)], const=(2,), grad=False,
         name="float64"),
]

CASES += [
    Case("STFT", [rand(2, 16, 1), i64(4), rand(6, seed=1), None], const=(1,)),
    Case("STFT", [rand(1, 12, 2), i64(3), None, i64(5)], const=(1, 3),
         attrs={"onesided": 0}, name="complex_no_window"),
    Case("STFT", [rand(2, 10, 1), i64(2), rand(4, seed=2), i64(4)], const=(1, 3),
         name="window_and_length"),
]

for _op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    CASES += [
        Case(_op, [i64(10)], const=(0,)),
        Case(_op, [np.asarray(7, np.int32)], const=(0,), attrs={"periodic": 0},
             name="symmetric"),
        Case(_op, [i64(5)], const=(0,), attrs={"output_datatype": 11}, name="float64",
             rtol=1e-12, atol=1e-12),
    ]

CASES += [
    Case("MelWeightMatrix", [i64(8), i64(16), i64(8192), np.float32(0), np.float32(4096)],
         const=(0, 1, 2, 3, 4)),
    Case("MelWeightMatrix", [np.asarray(5, np.int32), np.asarray(64, np.int32),
                             np.asarray(16000, np.int32), np.float32(100),
                             np.float32(7000)],
         const=(0, 1, 2, 3, 4), attrs={"output_datatype": 11}, name="float64"),
]
