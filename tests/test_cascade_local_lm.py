"""The cascade's local-LM decider (server/cascade/deciders.py, ``llm=local:PATH``) on a tiny
random-weight Llama saved to a local directory (the real Gemma 3 270M GGUF takes about a minute to
load on 2 cores: bench/cascade_llm.py measures it): the prompt it feeds is the cascade prompt with
the duty verbatim, generation is greedy and bounded, and a reply without a decision keeps Aria silent."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from server.benchmarks.mpe.duty import DUTY_TEXT  # noqa: E402
from server.cascade.deciders import LocalLMDecider  # noqa: E402
from server.cascade.prompt import system_prompt, user_prompt  # noqa: E402
from server.scoring.errors import BackendUnavailable  # noqa: E402


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("tiny-lm")
    words = sorted({w for w in (system_prompt(DUTY_TEXT) + " " + user_prompt(["x"])).split()})
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="</s>").save_pretrained(d)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
                      bos_token_id=1, eos_token_id=2, pad_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(d)
    return d


def test_local_decider_prompt_bounded_greedy_generation_and_garbage_is_silence(tiny_lm):
    lm = LocalLMDecider(str(tiny_lm), max_new_tokens=7, threads=1)
    lines = ["Okay, for four people it's six onions.", "Quick, Aria, how many onions for six people?"]
    tok, _ = lm.load()
    fed = tok.decode(lm.prompt_ids(lines, DUTY_TEXT)["input_ids"][0])
    assert fed.split()[:len(DUTY_TEXT.split())] == [w if w in tok.get_vocab() else "<unk>" for w in DUTY_TEXT.split()]
    d1, d2 = lm.decide(lines, DUTY_TEXT), lm.decide(lines, DUTY_TEXT)
    assert 0 < lm.last["new_tokens"] <= 7 and lm.last["prompt_tokens"] == len(fed.split())
    assert d1 == d2  # greedy: the same reply twice
    assert d1.label is None and not d1.respond  # random weights say no decision: she stays silent
    assert lm.describe()["decoding"] == "greedy" and lm.describe()["language_model"] is True


def test_local_decider_refuses_a_path_without_a_model(tmp_path):
    with pytest.raises(BackendUnavailable, match="no local model"):
        LocalLMDecider(str(tmp_path))
