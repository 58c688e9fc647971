"""ScanProblem: what a scan kernel computes, with the batch size and sequence length rounded up to powers of two."""
from __future__ import annotations

from dataclasses import dataclass

CELLS = ("linear", "min_gru", "min_lstm")
"""Cell names; their order gives the kernel's SCAN_CELL code."""

DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
"""Storage dtypes and their sizes in bytes; the dict order gives the kernel's SCAN_DTYPE code."""

DIRECTIONS = ("forward", "backward")
ALL_GRADIENTS = 7
"""`wanted` of a backward that writes every input's gradient (bit i: input i); run_scan clears the bits of inputs
whose gradient is not wanted, so that every cell's all-gradient problem is the same."""


def bucket(n: int) -> int:
    """The least power of two >= n (n >= 1): plans are made per bucket of batch sizes and lengths."""
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class ScanProblem:
    """One scan kernel: `cell` over `hidden_dim` channels stored as `dtype`, run `direction`, planned for `batch`
    sequences of `seq_len` steps (the plan's time model; the kernel takes any B and T at launch).

    The backward is the same scan run in reverse (dh_t = dy_t + a_{t+1} dh_{t+1}) with the gradient epilogue; it
    writes the gradients of the inputs whose bits `wanted` sets (bit i: input i; the forward keeps ALL_GRADIENTS).
    A `paired` forward is one that autograd will differentiate: its plan is made for its time in a forward + backward
    pair (cost_model.WorkModel.chained_ns_paired), where its inputs come from memory rather than from the L2 that
    repeated forwards leave them in. A `deterministic` one (torch.use_deterministic_algorithms) gives
    bitwise-identical results from run to run where its lanes are split over blocks (scan.cu's SCAN_DETERMINISTIC);
    whole lanes always do.
    """

    cell: str
    hidden_dim: int
    dtype: str
    batch: int
    seq_len: int
    direction: str = "forward"
    wanted: int = ALL_GRADIENTS
    paired: bool = False
    deterministic: bool = False

    def __post_init__(self) -> None:
        if self.cell not in CELLS:
            raise ValueError(f"unknown scan cell {self.cell!r}; use one of {CELLS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported scan dtype {self.dtype!r}; use one of {tuple(DTYPES)}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {self.direction!r}; use one of {DIRECTIONS}")
        for name in ("hidden_dim", "batch", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.wanted not in range(ALL_GRADIENTS + 1) or (self.direction == "forward"
                                                           and self.wanted != ALL_GRADIENTS):
            raise ValueError(f"wanted must be a bit set in 0..{ALL_GRADIENTS} (bit i: input i's gradient; none: h0's "
                             f"alone; the forward takes {ALL_GRADIENTS}), got {self.wanted!r}")
        if not isinstance(self.paired, bool) or (self.paired and self.direction != "forward"):
            raise ValueError(f"paired (a forward that a backward follows) is a bool, True for forwards only; got "
                             f"{self.paired!r} for direction {self.direction!r}")
        if not isinstance(self.deterministic, bool):
            raise ValueError(f"deterministic is a bool, got {self.deterministic!r}")

    @classmethod
    def for_shape(cls, cell: str, batch: int, seq_len: int, hidden_dim: int, dtype: str,
                  direction: str = "forward", wanted: int = ALL_GRADIENTS, paired: bool = False,
                  deterministic: bool = False) -> ScanProblem:
        """The problem of a [batch, seq_len, hidden_dim] scan, batch and seq_len rounded up to powers of two."""
        return cls(cell, hidden_dim, dtype, bucket(batch), bucket(seq_len), direction, wanted, paired, deterministic)

    @property
    def input_count(self) -> int:
        """[B, T, D] inputs the cell reads per step (linear: a, b; minGRU: k, h_pre; minLSTM: f, i, h_pre)."""
        return 3 if self.cell == "min_lstm" else 2

    @property
    def gradients(self) -> int:
        """Input gradients the backward writes."""
        return bin(self.wanted & ((1 << self.input_count) - 1)).count("1")

    @property
    def reads_h(self) -> bool:
        """Whether the backward reads the forward's h: the gradients of a's inputs need h_{t-1} (x1's, minLSTM's x2's
        too; scan.cu, SCAN_READS_H)."""
        return self.direction == "backward" and bool(self.wanted & (3 if self.cell == "min_lstm" else 1))

    @property
    def staged_count(self) -> int:
        """[B, T, D] values per step the kernel stages in shared memory: forward the inputs; backward a_{t+1}'s
        inputs, dL/dh_t, h_{t-1} where it reads h, and the minGRU / minLSTM candidate's input (scan.cu,
        SCAN_STAGED)."""
        if self.direction == "forward":
            return self.input_count
        return self.input_count + self.reads_h + (self.cell != "linear")

    @property
    def traffic_elements(self) -> int:
        """[B, T, D] tensors read or written once per step: forward the inputs and h; backward dL/dh, the inputs
        (the linear scan's a alone: its gradients do not depend on b), the forward h where it reads it, and the
        wanted gradients."""
        if self.direction == "forward":
            return self.input_count + 1
        return 1 + self.input_count - (self.cell == "linear") + self.reads_h + self.gradients

    @property
    def pair_reread_elements(self) -> int:
        """[B, T, D] tensors of a forward + backward pair that the backward reads again after the forward: the
        inputs (the linear scan's a alone) and h."""
        return self.input_count - (self.cell == "linear") + 1

    @property
    def fast_math(self) -> bool:
        """Whether the kernel uses the hardware exponential and reciprocal approximations (bf16 / fp16 storage,
        whose rounding is 2^-8 / 2^-11; fp32 keeps full-precision math)."""
        return self.dtype != "float32"

    @property
    def element_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one [batch, seq_len, hidden_dim] tensor stored as `dtype`."""
        return self.batch * self.seq_len * self.hidden_dim * self.element_bytes
