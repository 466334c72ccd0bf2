"""Write a tiny Llama (config and tokenizer, no weights) into a folder, for ``--load-format dummy``.

Run by the vLLM environment's interpreter (``python make_model.py OUT``), not imported by Oximeter:
it needs ``tokenizers`` and ``transformers``, which that environment pins. Nothing is downloaded.
The weights are vLLM's dummy ones (random), so the text is noise; the scheduling, the KV cache and
the metrics are vLLM's own. Head size 64: the CPU attention kernel refuses smaller heads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB_SIZE = 512
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": VOCAB_SIZE,
    "max_position_embeddings": 8192,  # the demo's engines take long prompts
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2, as the config names them
# Enough text for a byte-level BPE to learn merges up to VOCAB_SIZE; the words do not matter.
CORPUS = [
    "The engine schedules requests in batches and generates one token per step for each of them.",
    "A request waits in the queue until the scheduler finds room for its blocks in the KV cache.",
    "When the cache is full, the scheduler preempts a running request and recomputes it later.",
    "Inference servers stream tokens back to the client as soon as each one is generated.",
    "Prometheus scrapes the metrics endpoint every few seconds and keeps the samples it reads.",
    "An operator on call wants to know which layer failed: the hardware, the engine or the platform.",
    "Latency to the first token grows with the prompt; the time between tokens grows with the batch.",
    "Quick brown foxes jump over lazy dogs while zebras, yaks and wolves watch the vexed judge.",
] * 8
# A plain chat template: the OpenAI chat endpoint needs one, and a made-up model ships none.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


def main(out: Path) -> None:
    """Write ``config.json`` and the tokenizer files into ``out``."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2, sort_keys=True), encoding="utf-8")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS, vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=SPECIALS,
                            show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", model_max_length=CONFIG["max_position_embeddings"])
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
