"""The index of concepts: the terms a reader looks up, each linked to the section of the
chapter that explains it. The site's "Index of concepts" page lists them A to Z.

Each entry names the chapter (its topic) and the section by its anchor on the chapter's
page, the id the site gives the heading (:func:`section_anchor`). The book's tests check
that the section exists and that its text uses the term (``tests/test_concepts.py``);
a renamed heading fails them, and the site's link check, until the entry follows.

The index replaces Sphinx's general index, which listed the helpers' names (the API
reference lists those) and no concept; the site builds no ``genindex`` page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import memobook


@dataclass(frozen=True)
class Concept:
    """A term of the index.

    Attributes:
        term: the term as the index shows it; backticks mark code.
        chapter: the topic of the chapter that explains it (``views``).
        anchor: the id of the section that explains it, on the chapter's page.
        used_as: how the section's text writes the term, where it differs from ``term``
            (case and backticks aside).
    """

    term: str
    chapter: str
    anchor: str
    used_as: str = ""

    @property
    def key(self) -> str:
        """The term as the index sorts it: lower case, no backticks or leading dots."""
        return self.term.replace("`", "").lstrip(".").lower()


CONCEPTS = (
    Concept("attention mask (`attn_mask`)", "attention", "masks-true-takes-part-an-additive-mask-is-added", "attn_mask"),
    Concept("causal attention (`is_causal`)", "attention", "is-causal-a-triangle-from-the-top-left-corner", "is_causal"),
    Concept("FlashAttention", "attention", "which-kernel-runs-sdpa-kernel"),
    Concept("FlexAttention", "attention", "flexattention-on-a-gpu"),
    Concept("grouped-query attention (GQA)", "attention", "grouped-query-attention-enable-gqa", "grouped-query attention"),
    Concept("KV cache", "attention", "a-kv-cache-for-decoding"),
    Concept("scaled dot-product attention (SDPA)", "attention", "the-formula-and-scaled-dot-product-attention", "scaled_dot_product_attention"),
    Concept("activation checkpointing", "autograd_mechanics", "activation-checkpointing-torch-utils-checkpoint"),
    Concept("advanced indexing", "indexing", "advanced-indexing-returns-copies"),
    Concept("all-reduce", "devices", "all-reduce", "all_reduce"),
    Concept("anomaly mode", "numerics", "the-first-nan-of-the-backward-pass-anomaly-mode"),
    Concept("AOTAutograd", "compiling", "compiling-a-training-step"),
    Concept("autocast", "mixed_precision", "torch-autocast-on-cpu"),
    Concept("autograd graph", "autograd", "the-graph-grad-fn-is-leaf-and-next-functions", "graph"),
    Concept("backward in a profile (`...Backward0` rows)", "profiling", "how-backward-shows-in-the-table", "Backward0"),
    Concept("bfloat16", "mixed_precision", "four-floating-point-formats"),
    Concept("break-even (compiling)", "compiling", "when-compiling-does-not-pay", "break-even"),
    Concept("broadcasting", "broadcasting", "the-rules", "broadcast"),
    Concept("buffer", "buffers", "three-ways-to-hold-a-tensor"),
    Concept("`channels_last`", "creation", "images-nchw-nhwc-and-channels-last"),
    Concept("class imbalance (`WeightedRandomSampler`)", "data_loading", "weightedrandomsampler-balancing-classes", "WeightedRandomSampler"),
    Concept("collate function", "data_loading", "batching-and-the-default-collate-fn", "collate"),
    Concept("contiguous", "views", "which-operations-copy-contiguous-and-clone"),
    Concept("copy-on-read (DataLoader workers)", "data_loading", "memory-that-grows-in-every-worker-copy-on-read", "copy-on-read"),
    Concept("cross entropy", "losses", "the-formula"),
    Concept("CUDA graphs", "compiling", "mode-what-each-mode-asks-of-inductor"),
    Concept("custom operator", "extensions", "a-real-operator-torch-library-custom-op", "custom_op"),
    Concept("data-dependent shapes", "indexing", "nonzero-and-masked-select-shapes-that-depend-on-the-values", "depend on the values"),
    Concept("DataLoader `timeout`", "data_loading", "timeout-a-worker-that-never-answers", "timeout"),
    Concept("DataLoader workers", "data_loading", "worker-processes-num-workers", "worker"),
    Concept("default dtype", "creation", "how-the-dtype-is-inferred-and-the-default-dtype"),
    Concept("deterministic algorithms", "randomness", "deterministic-algorithms"),
    Concept("device", "devices", "device-objects-and-device-strings"),
    Concept("DistributedDataParallel (DDP)", "devices", "a-distributeddataparallel-step", "DistributedDataParallel"),
    Concept("`DistributedSampler`", "data_loading", "distributedsampler-one-shard-per-rank"),
    Concept("dropout in `eval()` mode", "training_loop", "train-and-eval-what-they-switch", "dropout"),
    Concept("Dynamo", "compiling", "what-torch-compile-does"),
    Concept("dynamic shapes", "compiling", "recompiling-new-shapes-and-dynamic", "dynamic"),
    Concept("eps (machine epsilon)", "mixed_precision", "rounding-integers-and-eps", "eps"),
    Concept("fine-tuning", "training_loop", "freezing-layers-for-fine-tuning"),
    Concept("float64", "numerics", "when-float64-helps-and-what-it-costs"),
    Concept("forward hooks", "numerics", "the-first-non-finite-value-of-the-forward-pass-forward-hooks", "forward hook"),
    Concept("freezing layers", "training_loop", "freezing-layers-for-fine-tuning", "freez"),
    Concept("FSDP (fully sharded data parallel)", "devices", "sharding-fsdp2-fully-shard", "fully_shard"),
    Concept("generator", "randomness", "generators-the-global-one-your-own-one-per-device"),
    Concept("`.grad` accumulation", "autograd_mechanics", "grad-accumulates", "accumulate"),
    Concept("grad mode", "autograd_mechanics", "no-grad-inference-mode-and-eval-which-is-not-a-grad-mode"),
    Concept("gradient accumulation", "training_loop", "gradient-accumulation-a-big-batch-in-small-pieces"),
    Concept("gradient accumulation with DDP (`no_sync`)", "devices", "gradient-accumulation-with-no-sync", "no_sync"),
    Concept("gradient clipping", "training_loop", "gradient-clipping-clip-grad-norm-returns-the-norm-before-clipping", "clip"),
    Concept("`GradScaler`", "mixed_precision", "loss-scaling-and-gradscaler"),
    Concept("graph break", "compiling", "graph-breaks"),
    Concept("guards (torch.compile)", "compiling", "recompiling-new-shapes-and-dynamic", "guard"),
    Concept("hooks", "autograd_mechanics", "tensor-hooks-register-hook", "hook"),
    Concept("Huber loss", "losses", "regression-losses-mse-l1-huber-and-smoothl1", "Huber"),
    Concept("Inductor", "compiling", "inductor-the-code-it-generates"),
    Concept("inference mode", "autograd", "torch-no-grad-and-torch-inference-mode", "inference_mode"),
    Concept("inter-op threads", "processes", "intra-op-threads-one-operation-several-cores", "inter-op"),
    Concept("intra-op threads", "processes", "intra-op-threads-one-operation-several-cores"),
    Concept("KL divergence", "losses", "kl-divergence-f-kl-div-and-nn-kldivloss"),
    Concept("label smoothing", "losses", "label-smoothing", "label_smoothing"),
    Concept("leaf tensor", "autograd", "the-graph-grad-fn-is-leaf-and-next-functions", "leaf"),
    Concept("learning-rate schedule", "training_loop", "learning-rate-schedules-warmup-then-cosine", "schedule"),
    Concept("log-sum-exp", "losses", "log-sum-exp-the-softmax-denominator-without-overflow"),
    Concept("logits", "losses", "logits-not-probabilities"),
    Concept("loss scaling", "mixed_precision", "loss-scaling-and-gradscaler"),
    Concept("`map_location`", "saving", "map-location-and-to-where-tensors-land-and-where-the-model-is"),
    Concept("memory format", "views", "is-contiguous-and-memory-formats"),
    Concept("memory snapshot", "profiling", "what-the-allocator-did-step-by-step-memory-snapshots"),
    Concept("meta device", "buffers", "built-on-the-meta-device-a-non-persistent-buffer-is-lost", "meta"),
    Concept("`mmap`", "saving", "mmap-true-load-without-reading"),
    Concept("momentum (SGD)", "training_loop", "optimizers-sgd-with-momentum-and-adamw", "momentum"),
    Concept("mult-adds", "profiling", "what-mult-adds-count"),
    Concept("NaN and inf", "numerics", "nan-and-inf-and-how-to-test-for-them", "NaN"),
    Concept("negative log-likelihood (`nll_loss`)", "losses", "f-nll-loss-takes-log-probabilities", "nll_loss"),
    Concept("non-persistent buffer", "buffers", "persistent-false-a-buffer-left-out-of-the-checkpoint", "persistent"),
    Concept("`nn.Parameter`", "creation", "nn-parameter-a-tensor-that-a-module-trains"),
    Concept("oversubscription", "processes", "oversubscription-several-processes-each-with-every-core"),
    Concept("parameter groups", "training_loop", "parameter-groups-no-weight-decay-on-biases-and-norms-other-learning-rates", "group"),
    Concept("pinned memory", "data_loading", "pin-memory", "pin"),
    Concept("`random_split`", "data_loading", "splitting-and-joining-datasets-subset-random-split-concatdataset"),
    Concept("rank", "devices", "several-processes-torch-distributed"),
    Concept("recompiling", "compiling", "recompiling-new-shapes-and-dynamic"),
    Concept("`record_function`", "profiling", "profiling-a-training-step"),
    Concept("safetensors", "saving", "safetensors-weights-without-pickle"),
    Concept("sampler", "data_loading", "samplers-which-indices-in-which-order"),
    Concept("saved tensors", "autograd_mechanics", "what-autograd-saves-saved-tensors-hooks", "saved"),
    Concept("seed", "randomness", "what-torch-manual-seed-seeds-and-what-it-does-not"),
    Concept("self CPU time", "profiling", "self-cpu-and-cpu-total", "self CPU"),
    Concept("`set_stance`", "compiling", "stances-torch-compiler-set-stance"),
    Concept("`set_to_none`", "training_loop", "set-to-none-a-gradient-of-none-is-not-a-gradient-of-zeros"),
    Concept("shared memory (`share_memory_`)", "processes", "sharing-tensors-between-processes", "share_memory_"),
    Concept("sharing strategy", "processes", "received-0-items-of-ancdata-too-many-shared-tensors"),
    Concept("stable sort", "indexing", "sort-and-topk-ties", "`stable=True`"),
    Concept("start method", "processes", "start-methods-what-a-child-process-starts-with"),
    Concept("`state_dict`", "saving", "state-dict-the-recommended-thing-to-save"),
    Concept("storage", "views", "the-storage-itself-untyped-storage-and-data-ptr"),
    Concept("storage offset", "views", "stride-and-storage-offset", "storage_offset"),
    Concept("stride", "views", "stride-and-storage-offset"),
    Concept("subnormal numbers", "mixed_precision", "overflow-and-underflow", "subnormal"),
    Concept("temperature", "losses", "temperature"),
    Concept("TF32", "mixed_precision", "tf32-float32-matrix-products-on-tensor-cores"),
    Concept("top-k and top-p sampling", "losses", "top-k-and-top-p-cutting-the-tail-before-the-draw", "top-k"),
    Concept("`torch.compiler.disable`", "compiling", "keeping-code-out-torch-compiler-disable"),
    Concept("`torch.export`", "compiling", "torch-export-one-graph-to-deploy"),
    Concept("`torch.finfo`", "numerics", "torch-finfo-the-limits-of-each-format"),
    Concept("version counter", "views", "views-and-autograd-one-version-counter"),
    Concept("view", "views", "which-operations-return-views"),
    Concept("warmup (learning rate)", "training_loop", "learning-rate-schedules-warmup-then-cosine", "warmup"),
    Concept("weight decay", "training_loop", "parameter-groups-no-weight-decay-on-biases-and-norms-other-learning-rates"),
    Concept("`weights_only`", "saving", "weights-only-true-what-it-refuses-and-why"),
    Concept("world size", "devices", "several-processes-torch-distributed", "world_size"),
    Concept("`zero_grad`", "training_loop", "one-step-zero-grad-backward-step"),
)  # fmt: skip
"""Every concept of the index."""


@dataclass(frozen=True)
class Section:
    """A section of a chapter: its heading as written, its anchor and its markdown."""

    heading: str
    anchor: str
    text: str


_HEADING = re.compile(r"^(#{2,6})\s+(.*?)\s*$")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def heading_text(heading: str, *, code: bool = False) -> str:
    """A markdown heading as the site's text reads it: no emphasis or link targets, and
    no backticks (``code=True`` keeps them, to show code as code)."""
    text = _LINK.sub(r"\1", heading).replace("**", "").strip()
    return text if code else text.replace("`", "")


def section_anchor(heading: str) -> str:
    """The id the site gives a section with this heading (docutils' ``make_id``)."""
    from docutils.nodes import make_id

    return str(make_id(heading_text(heading)))


def sections(nb: dict[str, Any]) -> list[Section]:
    """The sections of a chapter (headings of level 2 and below), each with its markdown
    up to the next heading of the same or a higher level."""
    lines: list[tuple[int, str, str]] = []  # (level or 0, heading, line)
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in memobook.source(cell).splitlines():
            match = _HEADING.match(line)
            if match:
                lines.append((len(match.group(1)), match.group(2), line))
            else:
                lines.append((0, "", line))
    found = []
    for start, (level, heading, _) in enumerate(lines):
        if not level:
            continue
        body = []
        for later, _heading, line in lines[start + 1 :]:
            if later and later <= level:
                break
            body.append(line)
        found.append(Section(heading, section_anchor(heading), "\n".join(body)))
    return found


def by_initial() -> dict[str, list[Concept]]:
    """The concepts A to Z, grouped by the first letter of their sort key."""
    grouped: dict[str, list[Concept]] = {}
    for concept in sorted(CONCEPTS, key=lambda c: c.key):
        grouped.setdefault(concept.key[0].upper(), []).append(concept)
    return grouped
