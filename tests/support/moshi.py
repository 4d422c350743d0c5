"""A Moshi checkpoint with random weights and tiny dimensions, written on the CPU without a download.

The LM keeps Moshi's stream layout (16 codebooks: 8 generated, 8 of the room; card 2048; the
delays) and shrinks the rest (width, layers, heads, text vocabulary); Mimi keeps its frame rate
(12.5 Hz, 1920 samples at 24 kHz: the same strides) with a few filters and one transformer layer.
The directory has the layout of Kyutai's repositories (config.json in the ``moshi`` package's
format, safetensors weights, a SentencePiece tokenizer), so the bridge loads it with its real
loading code.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

TEXT_CARD = 64
WORDS = ("where is the station it is about two kilometres from here turn left at the bakery and walk on "
         "what time is it now the meeting starts at nine thirty so we have plenty of time yes no maybe")


def tiny_configs() -> tuple[dict, dict]:
    from moshi.models import loaders

    mimi = copy.deepcopy(loaders._mimi_config)
    mimi["seanet"].update(n_filters=4, dimension=32)
    mimi["quantizer"].update(dimension=16, input_dimension=32, output_dimension=32, n_q=8)
    mimi["transformer"].update(d_model=32, num_heads=2, num_layers=1, dim_feedforward=64, input_dimension=32,
                               output_dimensions=[32])
    lm = dict(loaders._lm_kwargs, dim=32, text_card=TEXT_CARD, num_heads=2, num_layers=1, depformer_dim=32,
              depformer_dim_feedforward=64, depformer_num_heads=2, depformer_num_layers=1, context=500)
    return lm, mimi


def write_tiny_moshi(directory: Path, seed: int = 0) -> Path:
    """Write the checkpoint into ``directory`` (created) and return it."""
    import sentencepiece as spm
    import torch
    from moshi.models import loaders
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    lm_cfg, mimi_cfg = tiny_configs()
    torch.manual_seed(seed)
    mimi = loaders.get_mimi(None, mimi_cfg, device="cpu", num_codebooks=8)
    lm = loaders.get_moshi_lm(None, lm_kwargs=lm_cfg, device="cpu", dtype=torch.float32)
    for module in mimi.modules():  # random codebooks, marked initialised (a fresh quantizer's are empty)
        if hasattr(module, "embedding_sum") and hasattr(module, "_initialized"):
            module.embedding_sum.data.normal_(0.0, 0.05)  # near the latents: codes follow the input
            module.cluster_usage.data.fill_(1.0)
            module._initialized.data.fill_(1.0)
    save_file({k: v.contiguous() for k, v in mimi.state_dict().items()}, str(directory / "mimi.safetensors"))
    save_file({k: v.contiguous() for k, v in lm.state_dict().items()}, str(directory / "model.safetensors"))
    (directory / "mimi_config.json").write_text(json.dumps(mimi_cfg), "utf-8")
    config = dict(lm_cfg, moshi_name="model.safetensors", mimi_name="mimi.safetensors",
                  tokenizer_name="tokenizer.model", mimi_config_name="mimi_config.json", model_type="moshi")
    (directory / "config.json").write_text(json.dumps(config), "utf-8")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter([WORDS] * 20), model_writer=model, vocab_size=TEXT_CARD,
                                   hard_vocab_limit=False, model_type="unigram", minloglevel=2)
    (directory / "tokenizer.model").write_bytes(model.getvalue())
    return directory
