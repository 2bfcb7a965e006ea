"""Chat templates written for the tests, in the three styles chat checkpoints use (none copied
from a model): ChatML with a default system turn, a Llama 3 style header template that trims the
contents, and an `[INST]` style that folds the system turn into the first user turn, strips
contents and refuses roles that do not alternate. Plus templates the grammar must refuse."""

CHATML_WITH_DEFAULT_SYSTEM = (
    "{% if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful support assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CHATML_SPECIAL = ("<|im_start|>", "<|im_end|>")

HEADER_STYLE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
HEADER_SPECIAL = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
HEADER_VARIABLES = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}

INST_STYLE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] %}{% set turns = messages[1:] %}"
    "{% else %}{% set system = false %}{% set turns = messages %}{% endif %}"
    "{% for message in turns %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if loop.index0 == 0 and system %}"
    "{% set content = '<<SYS>>\\n' + system + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)
INST_SPECIAL = ("<s>", "</s>")
INST_VARIABLES = {"bos_token": "<s>", "eos_token": "</s>"}

# Not a fixed text between turns: the turn number is written before each message.
NUMBERED_TURNS = (
    "{% for message in messages %}{{ 'Turn ' + (loop.index | string) + ' ' + message['role'] + ': ' + message['content'] + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)
# Changes the contents: upper-cases what the user wrote.
SHOUTING = (
    "{% for message in messages %}{{ message['role'] + ': ' + (message['content'] | upper if message['role'] == 'user' "
    "else message['content']) + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)

# ChatML with TRL's `{% generation %}` markers around each reply (Hugging Face's assistant-mask
# extension): rendered exactly as without them.
CHATML_WITH_GENERATION_MARKERS = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

STYLES = {
    "chatml": (CHATML_WITH_DEFAULT_SYSTEM, CHATML_SPECIAL, {}),
    "header": (HEADER_STYLE, HEADER_SPECIAL, HEADER_VARIABLES),
    "inst": (INST_STYLE, INST_SPECIAL, INST_VARIABLES),
}

# Every template the fixtures were recorded with (tests/fixtures/make_chat_fixtures.py), by style.
TEMPLATES_BY_STYLE = {
    **{name: template for name, (template, _, _) in STYLES.items()},
    "chatml_generation": CHATML_WITH_GENERATION_MARKERS,
}

CONVERSATIONS = [
    [("user", "How do I turn on sync?")],
    [("user", "How do I turn on sync?"), ("assistant", "Open Settings > Sync and switch it on.")],
    [
        ("system", "You answer in one sentence."),
        ("user", "  Where are my notes?\n"),
        ("assistant", "They are under Library. "),
        ("user", "Merci ! Et les pièces jointes 📎 ?"),
        ("assistant", "Sous « Pièces jointes »."),
    ],
    [("user", "我的笔记不见了"), ("assistant", "请在设置中检查同步。"), ("user", "typed <|im_end|> and </s> myself")],
    [("system", "Réponds en français, sans formules."), ("user", "Où est l'export ? 🙂")],
    [("user", "Emoji 👩\u200d💻🎉 and a\ttab"), ("assistant", "\n  Noted: «ok».\n\n"), ("user", "Ещё раз, пожалуйста")],
]


def conversation_batch(conversations):
    """(roles, contents) [batch, turns] string tensors, "" after each conversation's last turn (the
    `chat` signature's and Transform's conversation layout)."""
    import tensorflow as tf

    width = max(len(c) for c in conversations)
    roles = [[role for role, _ in c] + [""] * (width - len(c)) for c in conversations]
    contents = [[content for _, content in c] + [""] * (width - len(c)) for c in conversations]
    return tf.constant(roles), tf.constant(contents)
