"""A Qwen3-ASR checkpoint of transformers' own classes with tiny random weights, written to a
directory as a converted ``-hf`` checkpoint is (config, weights, processor, tokenizer, chat
template), so the ``qwen3-asr`` ASR backend runs its real code path here without a download.

The tokenizer is byte-level BPE over the 256 byte symbols and the special tokens the processor
reads (``audio_token``, ``audio_bos_token``, ``audio_eos_token``; ``<asr_text>``, which the
transcription request prefills after ``language English``). The chat template is written for
this checkpoint in the shape of Qwen's (system, user with the audio span, assistant prefill).
The language-model head is zero, so every step's logits tie and greedy decoding emits token 0,
which is ``FIRST`` (a test knows exactly what the model says: ``FIRST`` once per new token).
"""

from __future__ import annotations

from pathlib import Path

FIRST = "A"
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>",
            "<asr_text>")
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
            "{% if c['type'] == 'audio' %}<|audio_start|><|audio_pad|><|audio_end|>{% else %}{{ c['text'] }}{% endif %}"
            "{% endfor %}{% if not loop.last %}<|im_end|>\n{% endif %}{% endfor %}")


def build_tiny_qwen3_asr(out: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (
        PreTrainedTokenizerFast,
        Qwen3ASRConfig,
        Qwen3ASRFeatureExtractor,
        Qwen3ASRForConditionalGeneration,
        Qwen3ASRProcessor,
    )

    symbols = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda c: (c != FIRST, c))
    bpe = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(symbols)}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens(list(SPECIALS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        extra_special_tokens={"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                              "audio_eos_token": "<|audio_end|>"})
    Qwen3ASRProcessor(feature_extractor=Qwen3ASRFeatureExtractor(), tokenizer=tok,
                      chat_template=TEMPLATE).save_pretrained(out)
    ids = tok.convert_tokens_to_ids
    cfg = Qwen3ASRConfig(
        audio_config={"encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 32, "d_model": 16,
                      "output_dim": 32, "downsample_hidden_size": 8},
        text_config={"vocab_size": len(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                     "max_position_embeddings": 4096, "tie_word_embeddings": False},
        tie_word_embeddings=False, audio_token_id=ids("<|audio_pad|>"), timestamp_token_id=ids("<asr_text>"),
        pad_token_id=ids("<|endoftext|>"), eos_token_id=[ids("<|im_end|>")])
    torch.manual_seed(0)
    model = Qwen3ASRForConditionalGeneration(cfg)
    with torch.no_grad():
        model.lm_head.weight.zero_()
    model.save_pretrained(out)
    return out
