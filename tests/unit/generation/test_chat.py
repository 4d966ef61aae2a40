"""Chat templates: where they come from (the config's, tokenizer_config.json's, the default),
how they render, and how they refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferd.errors import InvalidInputError
from inferd.generation.chat import DEFAULT_TEMPLATE, ChatTemplateError, load_chat_template

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_without_a_template_the_default_is_one_line_per_message(tmp_path: Path) -> None:
    template = load_chat_template([tmp_path], None, "<eos>")
    assert template.origin == "default" and template.source == DEFAULT_TEMPLATE
    assert template.render(MESSAGES) == "system: Be brief.\nuser: Hi\nassistant:"


def test_the_tokenizer_config_gives_the_template_and_its_tokens(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]"
                "{{ m.content }}{{ eos_token }}{% endfor %}"
                "{% if add_generation_prompt %}[assistant]{% endif %}",
                "bos_token": {"content": "<s>"},
                "eos_token": "</s>",
            }
        )
    )
    template = load_chat_template([tmp_path / "missing", tmp_path], None, "<eos>")
    assert template.origin == "tokenizer_config.json"
    assert template.render(MESSAGES) == "<s>[system]Be brief.</s>[user]Hi</s>[assistant]"


def test_named_templates_use_the_default_and_the_config_wins(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": [
                    {"name": "tool_use", "template": "tools"},
                    {"name": "default", "template": "{{ messages[-1].content }}"},
                ]
            }
        )
    )
    assert load_chat_template([tmp_path], None, "").render(MESSAGES) == "Hi"
    override = load_chat_template([tmp_path], "{{ messages | length }}", "")
    assert override.origin == "generation.chat_template" and override.render(MESSAGES) == "2"


def test_a_template_can_refuse_a_conversation(tmp_path: Path) -> None:
    strict = (
        "{% if messages[0].role != 'user' %}"
        "{{ raise_exception('the first message must be the user\\'s') }}{% endif %}ok"
    )
    template = load_chat_template([tmp_path], strict, "")
    with pytest.raises(InvalidInputError, match="the first message must be the user's"):
        template.render(MESSAGES)
    assert template.render(MESSAGES[1:]) == "ok"


def test_a_broken_template_or_file_stops_the_load(tmp_path: Path) -> None:
    with pytest.raises(ChatTemplateError, match="not valid Jinja"):
        load_chat_template([tmp_path], "{% for m in messages %}", "")
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ChatTemplateError, match="cannot read it"):
        load_chat_template([tmp_path], None, "")


def test_the_sandbox_keeps_templates_from_python(tmp_path: Path) -> None:
    sneaky = "{{ messages.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(InvalidInputError):
        load_chat_template([tmp_path], sneaky, "").render(MESSAGES)
