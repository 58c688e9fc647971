"""State tracking: the running parity of a bit stream, learned by FlashLSTM, FlashSLSTM and a small Transformer.

Parity needs a state that flips on every 1 bit: a recurrent network carries it step by step and so keeps working
on sequences far longer than those it was trained on, while a Transformer has to recompute it from all earlier
positions at every step, and past the training length its attention and positional encodings see values it was
never trained on.

Every model reads a padded batch of bit streams of random lengths (up to `train_length`) and predicts the parity
of each prefix; the recurrent models take the padding into account through `lengths=`. After training, each is
evaluated on the parity of whole sequences of `eval_lengths`, up to 32 times the training length. The learning
curves and the length-generalisation curves are saved as PNGs in `out_dir`, with a short Markdown summary.

    python examples/state_tracking.py                 # full size: about three minutes on a 2-core CPU
    python examples/state_tracking.py --steps 300     # a quick look
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from flashrnn_kernels import FlashLSTM, FlashSLSTM

DEFAULT_OUT_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def parity_batch(batch: int, max_length: int, generator: torch.Generator, fixed: bool = False):
    """bits [B, T] in {0, 1}, running parity targets [B, T], and lengths [B] (each max_length when `fixed`)."""
    bits = torch.randint(0, 2, (batch, max_length), generator=generator)
    if fixed:
        lengths = torch.full((batch,), max_length)
    else:
        lengths = torch.randint(1, max_length + 1, (batch,), generator=generator)
    bits = bits * (torch.arange(max_length) < lengths[:, None])  # zero padding past each end
    return bits, bits.cumsum(1) % 2, lengths


class RecurrentTagger(nn.Module):
    """Bit embedding -> a recurrent module from flashrnn_kernels -> a linear read-out per step."""

    def __init__(self, recurrent: type[nn.Module], hidden_size: int, num_heads: int, backend: str):
        super().__init__()
        self.embed = nn.Embedding(2, hidden_size)
        self.rnn = recurrent(hidden_size, hidden_size, num_heads=num_heads, backend=backend)
        self.head = nn.Linear(hidden_size, 2)

    def forward(self, bits: Tensor, lengths: Tensor) -> Tensor:
        output, _ = self.rnn(self.embed(bits), lengths=lengths)
        return self.head(output)


class TransformerTagger(nn.Module):
    """Causal Transformer encoder with sinusoidal positional encodings."""

    def __init__(self, hidden_size: int, num_heads: int, num_layers: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(2, hidden_size)
        layer = nn.TransformerEncoderLayer(
            hidden_size, num_heads, dim_feedforward=2 * hidden_size, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden_size, 2)

    def positions(self, steps: int, device: torch.device) -> Tensor:
        position = torch.arange(steps, device=device, dtype=torch.float32)[:, None]
        frequency = torch.exp(torch.arange(0, self.hidden_size, 2, device=device) * (-math.log(1e4) / self.hidden_size))
        encoding = torch.zeros(steps, self.hidden_size, device=device)
        encoding[:, 0::2], encoding[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
        return encoding

    def forward(self, bits: Tensor, lengths: Tensor) -> Tensor:
        steps = bits.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(steps, device=bits.device)
        x = self.embed(bits) * math.sqrt(self.hidden_size) + self.positions(steps, bits.device)
        return self.head(self.encoder(x, mask=causal, is_causal=True))


def _masked_loss_and_accuracy(logits: Tensor, targets: Tensor, lengths: Tensor) -> tuple[Tensor, float]:
    valid = torch.arange(targets.shape[1], device=targets.device) < lengths[:, None].to(targets.device)
    loss = nn.functional.cross_entropy(logits[valid], targets[valid])
    accuracy = (logits[valid].argmax(-1) == targets[valid]).float().mean().item()
    return loss, accuracy


def train(model: nn.Module, steps: int, batch: int, train_length: int, lr: float, seed: int, device):
    """Adam with a cosine decay; returns the learning curve [(step, loss, accuracy on the training lengths)]."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(steps, 1))
    curve = []
    model.train()
    for step in range(1, steps + 1):
        bits, targets, lengths = parity_batch(batch, train_length, generator)
        logits = model(bits.to(device), lengths)
        loss, accuracy = _masked_loss_and_accuracy(logits, targets.to(device), lengths)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        curve.append((step, loss.item(), accuracy))
    return curve


@torch.no_grad()
def evaluate(model: nn.Module, eval_lengths: list[int], samples: int, seed: int, device) -> dict[int, float]:
    """Accuracy of the predicted parity of whole sequences of each length."""
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    accuracies = {}
    for length in eval_lengths:
        bits, targets, lengths = parity_batch(samples, length, generator, fixed=True)
        logits = model(bits.to(device), lengths)
        accuracies[length] = (logits[:, -1].argmax(-1).cpu() == targets[:, -1]).float().mean().item()
    return accuracies


def _moving_average(values: Tensor) -> Tensor:
    """Mean over a trailing window of about 2% of the points (shorter at the start)."""
    window = max(len(values) // 50, 1)
    sums = torch.cat([values.new_zeros(1), values.cumsum(0)])
    ends = torch.arange(1, len(values) + 1)
    starts = (ends - window).clamp(min=0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def _plot(results: dict, train_length: int, out_dir: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    paths = {"learning_curve_png": out_dir / "state_tracking_learning_curves.png",
             "length_generalisation_png": out_dir / "state_tracking_length_generalisation.png"}
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for name, result in results.items():
        steps, losses, accuracies = (torch.tensor(column, dtype=torch.float64) for column in zip(*result["curve"]))
        loss_axis.plot(steps, _moving_average(losses.log()).exp(), label=name)
        accuracy_axis.plot(steps, _moving_average(accuracies), label=name)
    for axis in (loss_axis, accuracy_axis):
        axis.set(xscale="log", xlabel="training step (batches of sequences)")
    loss_axis.set(ylabel="cross-entropy", yscale="log", title="Training loss (geometric moving average)")
    accuracy_axis.set(ylabel="accuracy", ylim=(0.4, 1.02),
                      title=f"Prefix-parity accuracy, lengths 1..{train_length} (moving average)")
    for axis in (loss_axis, accuracy_axis):
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(paths["learning_curve_png"], dpi=120)
    plt.close(figure)

    figure, axis = plt.subplots(figsize=(6.5, 4))
    for (name, result), style in zip(results.items(), ("-o", "--s", "-^")):
        lengths, accuracies = zip(*sorted(result["eval_accuracy"].items()))
        axis.plot(lengths, accuracies, style, label=name, markersize=7 if style == "-o" else 5)
    axis.axvline(train_length, color="gray", linestyle="--", label=f"longest training sequence ({train_length})")
    axis.axhline(0.5, color="gray", linestyle=":", label="chance")
    axis.set(xscale="log", xlabel="sequence length", ylabel="accuracy", ylim=(0.3, 1.05),
             title="Parity of whole sequences: length generalisation")
    axis.set_xticks(lengths, [str(n) for n in lengths], minor=False)
    axis.xaxis.set_minor_locator(NullLocator())
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(paths["length_generalisation_png"], dpi=120)
    plt.close(figure)
    return {key: str(path) for key, path in paths.items()}


def _summary(results: dict, settings: dict) -> str:
    lengths = sorted(next(iter(results.values()))["eval_accuracy"])
    lines = [
        "# State tracking: running parity of a bit stream",
        "",
        "Produced by `examples/state_tracking.py` with "
        + ", ".join(f"{key}={value}" for key, value in settings.items())
        + ". Accuracy of the predicted parity of whole sequences (chance: 0.5); training used lengths 1.."
        + f"{settings['train_length']}.",
        "",
        "| model | parameters | train s | final loss | " + " | ".join(f"T={n}" for n in lengths) + " |",
        "|---|---|---|---|" + "---|" * len(lengths),
    ]
    for name, result in results.items():
        accuracy = " | ".join(f"{result['eval_accuracy'][n]:.3f}" for n in lengths)
        cells = f"{result['parameters']} | {result['train_seconds']:.0f} | {result['curve'][-1][1]:.2g}"
        lines.append(f"| {name} | {cells} | {accuracy} |")
    lines += ["", "Plots: `state_tracking_learning_curves.png`, `state_tracking_length_generalisation.png`.", ""]
    return "\n".join(lines)


def main(
    steps: int = 3000,
    batch: int = 32,
    train_length: int = 10,
    eval_lengths: tuple[int, ...] = (5, 10, 20, 40, 80, 160, 320),
    hidden_size: int = 32,
    samples: int = 256,
    device: str | None = None,
    out_dir: str | Path = DEFAULT_OUT_DIR,
    seed: int = 0,
) -> dict:
    """Train the three models, evaluate their length generalisation, write the plots; returns the results.

    steps: training batches per model; train_length: the longest training sequence; eval_lengths: the sequence
    lengths evaluated, `samples` sequences each; device: "cpu" (the reference path) or "cuda" (default when
    present); out_dir: where the two PNGs and state_tracking.md go.
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backend = "auto" if device.type == "cuda" else "reference"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)  # the reference path's many tiny per-step ops run fastest on one thread
    try:
        results = _run(steps, batch, train_length, eval_lengths, hidden_size, samples, device, backend, seed)
    finally:
        torch.set_num_threads(threads)
    settings = {"steps": steps, "batch": batch, "train_length": train_length, "hidden_size": hidden_size,
                "samples": samples, "device": str(device), "seed": seed}
    files = _plot(results, train_length, out_dir)
    summary_path = out_dir / "state_tracking.md"
    summary_path.write_text(_summary(results, settings))
    print(f"Running parity, trained on lengths 1..{train_length} for {steps} steps on {device}:")
    for name, result in results.items():
        accuracy = ", ".join(f"T={n}: {a:.2f}" for n, a in result["eval_accuracy"].items())
        print(f"  {name:<12} {result['train_seconds']:6.1f} s  {accuracy}")
    print(f"plots and summary in {out_dir}")
    return {"models": results, "settings": settings, **files, "summary_md": str(summary_path)}


def _run(steps, batch, train_length, eval_lengths, hidden_size, samples, device, backend, seed) -> dict:
    """Train and evaluate each model: {name: {curve, train_seconds, parameters, eval_accuracy}}."""
    torch.manual_seed(seed)
    models = {
        "FlashLSTM": (RecurrentTagger(FlashLSTM, hidden_size, 1, backend), 1e-2),
        "FlashSLSTM": (RecurrentTagger(FlashSLSTM, hidden_size, 4, backend), 1e-2),
        "Transformer": (TransformerTagger(hidden_size, num_heads=4, num_layers=3), 1e-3),
    }
    results = {}
    for name, (model, lr) in models.items():
        model.to(device)
        start = time.perf_counter()
        curve = train(model, steps, batch, train_length, lr, seed, device)
        seconds = time.perf_counter() - start
        results[name] = {
            "curve": curve,
            "train_seconds": seconds,
            "parameters": sum(p.numel() for p in model.parameters()),
            "eval_accuracy": evaluate(model, list(eval_lengths), samples, seed + 1, device),
        }
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], argument_default=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help="training steps per model (default 3000)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--out-dir", help=f"where the plots and summary go (default {DEFAULT_OUT_DIR})")
    main(**vars(parser.parse_args()))
