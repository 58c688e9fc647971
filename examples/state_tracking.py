"""State tracking (running parity, S5 composition) learned by FlashLSTM, FlashSLSTM and a small Transformer.

Both tasks need a state updated by every token: parity flips on every 1 bit; in the S5 word problem each token is
one of the 120 permutations of 5 elements and the state is the composition of all of them so far (a word problem
that is NC1-complete, so no fixed-depth Transformer is expected to solve it at every length). A recurrent network
carries the state step by step and so can keep working on sequences far longer than those it was trained on,
while a Transformer has to recompute it from all earlier positions at every step, and past the training length
its attention and positional encodings see values it was never trained on.

Every model reads a batch of token sequences and predicts the state after each prefix (the tasks are defined in
state_tracking_tasks.py). Parity batches mix lengths up to `train_length`, padded, which the recurrent models
take into account through `lengths=`; S5 batches are all of length `train_length`, whose prefixes are the shorter
examples. After training, each model is evaluated on the state after whole sequences of `eval_lengths`, far
longer than the training length. The learning curves and the length-generalisation curves are saved as PNGs in
`out_dir`, with a short Markdown summary, all named after the task.

    python examples/state_tracking.py                          # parity: about three minutes on a 2-core CPU
    python examples/state_tracking.py --task s5 --device cuda  # S5 on a GPU (fused LSTM kernel)
    python examples/state_tracking.py --task s5 --quick        # S5 at small size: a couple of minutes on a CPU
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import time
from pathlib import Path

import torch
from state_tracking_tasks import TASKS, Settings, Task
from torch import Tensor, nn

from flashrnn_kernels import FlashLSTM, FlashSLSTM

DEFAULT_OUT_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


class RecurrentTagger(nn.Module):
    """Token embedding -> a recurrent module from flashrnn_kernels -> a linear read-out per step."""

    def __init__(self, recurrent: type[nn.Module], task: Task, hidden_size: int, num_heads: int, backend: str):
        super().__init__()
        self.embed = nn.Embedding(task.tokens, hidden_size)
        self.rnn = recurrent(hidden_size, hidden_size, num_heads=num_heads, backend=backend)
        self.head = nn.Linear(hidden_size, task.classes)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        output, _ = self.rnn(self.embed(tokens), lengths=lengths, enforce_sorted=False)
        return self.head(output)


class TransformerTagger(nn.Module):
    """Causal Transformer encoder with sinusoidal positional encodings."""

    def __init__(self, task: Task, hidden_size: int, num_heads: int, num_layers: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.embed = nn.Embedding(task.tokens, hidden_size)
        layer = nn.TransformerEncoderLayer(
            hidden_size, num_heads, dim_feedforward=2 * hidden_size, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden_size, task.classes)

    def positions(self, steps: int, device: torch.device) -> Tensor:
        position = torch.arange(steps, device=device, dtype=torch.float32)[:, None]
        frequency = torch.exp(torch.arange(0, self.hidden_size, 2, device=device) * (-math.log(1e4) / self.hidden_size))
        encoding = torch.zeros(steps, self.hidden_size, device=device)
        encoding[:, 0::2], encoding[:, 1::2] = torch.sin(position * frequency), torch.cos(position * frequency)
        return encoding

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        steps = tokens.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(steps, device=tokens.device)
        x = self.embed(tokens) * math.sqrt(self.hidden_size) + self.positions(steps, tokens.device)
        return self.head(self.encoder(x, mask=causal, is_causal=True))


def _masked_loss_and_accuracy(logits: Tensor, targets: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    valid = torch.arange(targets.shape[1], device=targets.device) < lengths[:, None].to(targets.device)
    loss = nn.functional.cross_entropy(logits[valid], targets[valid])
    accuracy = (logits[valid].argmax(-1) == targets[valid]).float().mean()
    return loss, accuracy


def train(model: nn.Module, task: Task, steps: int, batch: int, train_length: int, lr: float, seed: int, device):
    """Adam with a cosine decay; returns the learning curve [(step, loss, accuracy on the training lengths)]."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(steps, 1))
    losses, accuracies = [], []
    model.train()
    for _ in range(steps):
        tokens, targets, lengths = task.draw(batch, train_length, generator, not task.varied_lengths)
        # No host synchronisation inside the loop (non-blocking copies, statistics kept on the device), so that
        # on a GPU the host queues the next steps while the current one runs.
        logits = model(tokens.to(device, non_blocking=True), lengths)
        loss, accuracy = _masked_loss_and_accuracy(logits, targets.to(device, non_blocking=True), lengths)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.detach())
        accuracies.append(accuracy)
    if not losses:
        return []
    values = zip(torch.stack(losses).tolist(), torch.stack(accuracies).tolist())
    return [(step, loss, accuracy) for step, (loss, accuracy) in enumerate(values, start=1)]


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, eval_lengths: list[int], samples: int, seed: int,
             device) -> dict[int, float]:
    """Accuracy of the predicted state after whole sequences of each length."""
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    accuracies = {}
    for length in eval_lengths:
        tokens, targets, lengths = task.draw(samples, length, generator, True)
        logits = model(tokens.to(device), lengths)
        accuracies[length] = (logits[:, -1].argmax(-1).cpu() == targets[:, -1]).float().mean().item()
    return accuracies


def _moving_average(values: Tensor) -> Tensor:
    """Mean over a trailing window of about 2% of the points (shorter at the start)."""
    window = max(len(values) // 50, 1)
    sums = torch.cat([values.new_zeros(1), values.cumsum(0)])
    ends = torch.arange(1, len(values) + 1)
    starts = (ends - window).clamp(min=0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def _plot(results: dict, task: Task, train_length: int, out_dir: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    paths = {"learning_curve_png": out_dir / f"{task.stem}_learning_curves.png",
             "length_generalisation_png": out_dir / f"{task.stem}_length_generalisation.png"}
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(11, 4))
    for name, result in results.items():
        steps, losses, accuracies = (torch.tensor(column, dtype=torch.float64) for column in zip(*result["curve"]))
        loss_axis.plot(steps, _moving_average(losses.log()).exp(), label=name)
        accuracy_axis.plot(steps, _moving_average(accuracies), label=name)
    for axis in (loss_axis, accuracy_axis):
        axis.set(xscale="log", xlabel="training step (batches of sequences)")
    loss_axis.set(ylabel="cross-entropy", yscale="log", title="Training loss (geometric moving average)")
    accuracy_axis.set(ylabel="accuracy", ylim=(max(task.chance - 0.1, -0.02), 1.02),
                      title=f"Prefix-{task.state} accuracy, lengths 1..{train_length} (moving average)")
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
    axis.axhline(task.chance, color="gray", linestyle=":", label="chance")
    axis.set(xscale="log", xlabel="sequence length", ylabel="accuracy", ylim=(max(task.chance - 0.2, -0.02), 1.05),
             title=f"{task.state.capitalize()} of whole sequences: length generalisation")
    axis.set_xticks(lengths, [str(n) for n in lengths], minor=False)
    axis.xaxis.set_minor_locator(NullLocator())
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(paths["length_generalisation_png"], dpi=120)
    plt.close(figure)
    return {key: str(path) for key, path in paths.items()}


def _summary(results: dict, task: Task, settings: dict) -> str:
    lengths = sorted(next(iter(results.values()))["eval_accuracy"])
    lines = [
        f"# State tracking: {task.title}",
        "",
        "Produced by `examples/state_tracking.py` with "
        + ", ".join(f"{key}={value}" for key, value in settings.items())
        + f". Accuracy of the predicted {task.state} of whole sequences (chance: {task.chance:.3g}); training used"
        + f" lengths 1..{settings['train_length']}.",
        "",
        "| model | parameters | train s | final loss | " + " | ".join(f"T={n}" for n in lengths) + " |",
        "|---|---|---|---|" + "---|" * len(lengths),
    ]
    for name, result in results.items():
        accuracy = " | ".join(f"{result['eval_accuracy'][n]:.3f}" for n in lengths)
        cells = f"{result['parameters']} | {result['train_seconds']:.0f} | {result['curve'][-1][1]:.2g}"
        lines.append(f"| {name} | {cells} | {accuracy} |")
    lines += ["", f"Plots: `{task.stem}_learning_curves.png`, `{task.stem}_length_generalisation.png`.", ""]
    return "\n".join(lines)


def main(
    task: str = "parity",
    quick: bool = False,
    steps: int | None = None,
    batch: int | None = None,
    train_length: int | None = None,
    eval_lengths: tuple[int, ...] | None = None,
    hidden_size: int | None = None,
    samples: int | None = None,
    device: str | None = None,
    out_dir: str | Path = DEFAULT_OUT_DIR,
    seed: int = 0,
) -> dict:
    """Train the three models on `task`, evaluate their length generalisation, write the plots; returns the results.

    task: "parity" or "s5"; quick: start from the task's quick settings instead of its full ones (see
    state_tracking_tasks.TASKS); the other sizes, when given, replace those settings: steps: training batches per
    model; train_length: the longest training sequence; eval_lengths: the sequence lengths evaluated, `samples`
    sequences each. device: "cpu" (the reference path) or "cuda" (default when present); out_dir: where the two
    PNGs and the Markdown summary go.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {sorted(TASKS)}")
    spec = TASKS[task]
    sizes = {"steps": steps, "batch": batch, "train_length": train_length, "eval_lengths": eval_lengths,
             "hidden_size": hidden_size, "samples": samples}
    chosen = dataclasses.replace(spec.quick if quick else spec.full,
                                 **{key: value for key, value in sizes.items() if value is not None})
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    backend = "auto" if device.type == "cuda" else "reference"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)  # the reference path's many tiny per-step ops run fastest on one thread
    try:
        results = _run(spec, chosen, device, backend, seed)
    finally:
        torch.set_num_threads(threads)
    settings = {"steps": chosen.steps, "batch": chosen.batch, "train_length": chosen.train_length,
                "hidden_size": chosen.hidden_size, "samples": chosen.samples, "device": str(device), "seed": seed}
    files = _plot(results, spec, chosen.train_length, out_dir)
    summary_path = out_dir / f"{spec.stem}.md"
    summary_path.write_text(_summary(results, spec, settings))
    title = spec.title[0].upper() + spec.title[1:]
    print(f"{title}, trained on lengths 1..{chosen.train_length} for {chosen.steps} steps on {device}:")
    for name, result in results.items():
        accuracy = ", ".join(f"T={n}: {a:.2f}" for n, a in result["eval_accuracy"].items())
        print(f"  {name:<12} {result['train_seconds']:6.1f} s  {accuracy}")
    print(f"plots and summary in {out_dir}")
    return {"task": task, "models": results, "settings": settings, **files, "summary_md": str(summary_path)}


def _run(task: Task, settings: Settings, device: torch.device, backend: str, seed: int) -> dict:
    """Train and evaluate each model: {name: {curve, train_seconds, parameters, eval_accuracy}}."""
    torch.manual_seed(seed)
    hidden = settings.hidden_size
    models = {
        "FlashLSTM": RecurrentTagger(FlashLSTM, task, hidden, 1, backend),
        "FlashSLSTM": RecurrentTagger(FlashSLSTM, task, hidden, settings.slstm_heads, backend),
        "Transformer": TransformerTagger(task, hidden, num_heads=4, num_layers=3),
    }
    results = {}
    for (name, model), lr in zip(models.items(), settings.learning_rates):
        model.to(device)
        start = time.perf_counter()
        curve = train(model, task, settings.steps, settings.batch, settings.train_length, lr, seed, device)
        seconds = time.perf_counter() - start
        results[name] = {
            "curve": curve,
            "train_seconds": seconds,
            "parameters": sum(p.numel() for p in model.parameters()),
            "eval_accuracy": evaluate(model, task, list(settings.eval_lengths), settings.samples, seed + 1, device),
        }
    return results


def positive(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return int(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], argument_default=argparse.SUPPRESS)
    parser.add_argument("--task", choices=sorted(TASKS), help="what to track (default parity)")
    parser.add_argument("--quick", action="store_true", help="the task's small settings: minutes on a CPU")
    parser.add_argument("--steps", type=positive, help="training steps per model (default: the task's)")
    parser.add_argument("--batch", type=positive, help="sequences per training step (default: the task's)")
    parser.add_argument("--hidden-size", type=positive, help="width of every model (default: the task's)")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--out-dir", help=f"where the plots and summary go (default {DEFAULT_OUT_DIR})")
    main(**vars(parser.parse_args()))
