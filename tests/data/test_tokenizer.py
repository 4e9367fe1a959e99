"""Char tokenizer round trips and a tiny local HF tokenizer with a chat template."""

import json
import os

import ml_collections
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgpo_jax.config import defaults as default_config
from sgpo_jax.data import tokenizer as tokenizer_lib
from sgpo_jax.data.tokenizer import (
  UNKNOWN_CHAR,
  CharTokenizer,
  HFTokenizer,
  load_saved_tokenizer,
  load_tokenizer,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> "
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}")


def test_char_vocabulary_layout():
  tok = CharTokenizer()
  assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (0, 1, 2, 15)
  assert tok.encode('0123456789+=') == list(range(3, 15))
  assert tok.encode_prompt('12+3=') == [1, 4, 5, 13, 6, 14]
  assert tok.stop_token_ids == [2]


def test_char_decode_stops_at_eos_and_skips_pad_bos():
  tok = CharTokenizer()
  assert tok.decode([0, 0, 1, 4, 5, 2, 6, 7]) == '12'
  assert tok.decode([]) == ''


def test_char_unknown_character_is_named():
  with pytest.raises(ValueError, match="'x'"):
    CharTokenizer().encode('1x2')


def test_char_decode_of_ids_outside_vocab_is_never_a_valid_answer():
  # The model's embedding table (16) is larger than the vocabulary (15): id 15 can be sampled.
  assert CharTokenizer().decode([4, 15, 99]) == '1' + tokenizer_lib.UNKNOWN_CHAR * 2


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet='0123456789+=', max_size=30))
def test_char_round_trip(text):
  tok = CharTokenizer()
  assert tok.decode(tok.encode(text) + [tok.eos_id, 5]) == text


def test_char_save_load(tmp_path):
  tok = CharTokenizer()
  path = tok.save(str(tmp_path))
  assert json.load(open(path))['alphabet'] == '0123456789+='
  loaded = load_saved_tokenizer(str(tmp_path))
  assert isinstance(loaded, CharTokenizer) and loaded.encode('9+1=') == tok.encode('9+1=')


def _tokenizer_config(**overrides) -> ml_collections.ConfigDict:
  config = default_config.get_config().tokenizer  # every field, defaults from one place
  config.update(overrides)
  return config


def test_load_tokenizer_char_and_bad_kind():
  assert isinstance(load_tokenizer(_tokenizer_config()), CharTokenizer)
  with pytest.raises(ValueError, match="kind='sentencepiece'"):
    load_tokenizer(_tokenizer_config(kind='sentencepiece'))


@pytest.fixture(scope='module')
def hf_dir(tmp_path_factory):
  """A tiny WordLevel tokenizer saved as a HF tokenizer directory (no downloads)."""
  from tokenizers import Tokenizer, models, pre_tokenizers
  from transformers import PreTrainedTokenizerFast

  specials = ['<pad>', '<s>', '</s>', '<unk>', '<|im_start|>', '<|im_end|>']
  words = ['what', 'is', '2', '+', '3', '?', 'the', 'answer', '5', 'user', 'system',
           'assistant', 'be', 'brief', '.']
  vocab = {w: i for i, w in enumerate(specials + words)}
  core = Tokenizer(models.WordLevel(vocab=vocab, unk_token='<unk>'))
  core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  fast = PreTrainedTokenizerFast(tokenizer_object=core, bos_token='<s>', eos_token='</s>',
                                 unk_token='<unk>', pad_token='<pad>',
                                 additional_special_tokens=['<|im_start|>', '<|im_end|>'])
  fast.chat_template = CHAT_TEMPLATE
  directory = str(tmp_path_factory.mktemp('hf_tok'))
  fast.save_pretrained(directory)
  return directory


@pytest.mark.slow
def test_hf_plain_prompt(hf_dir):
  tok = HFTokenizer(hf_dir)
  assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
  ids = tok.encode('what is 2 + 3 ?')
  assert len(ids) == 6 and tok.bos_id not in ids
  assert tok.encode_prompt('what is 2 + 3 ?') == [1] + ids
  assert tok.decode(ids + [tok.eos_id] + ids) == 'what is 2 + 3 ?'
  assert tok.vocab_size == 21


def test_hf_chat_template_and_stop_strings(hf_dir):
  tok = HFTokenizer(hf_dir, chat_template=True, system_prompt='be brief .',
                    stop_strings=['<|im_end|>'])
  text = tok.prompt_text('what is 2 + 3 ?')
  assert text == ('<|im_start|>system be brief .<|im_end|> <|im_start|>user what is 2 + 3 ?'
                  '<|im_end|> <|im_start|>assistant ')
  ids = tok.encode_prompt('what is 2 + 3 ?')
  assert ids[0] == tok.bos_id and ids[1] == tok.encode('<|im_start|>')[0]
  im_end = tok.encode('<|im_end|>')
  assert tok.stop_token_ids == [2] + im_end
  assert tok.decode(tok.encode('the answer is 5') + im_end + tok.encode('2')) == 'the answer is 5'


def test_hf_pad_falls_back_to_eos(hf_dir, tmp_path):
  tok = HFTokenizer(hf_dir)
  tok.tok.pad_token = None
  assert tok.pad_id == tok.eos_id


def test_hf_generation_config_eos_ids_are_stops(hf_dir, tmp_path):
  tok = HFTokenizer(hf_dir)
  tok.save(str(tmp_path))
  with open(os.path.join(tmp_path, 'generation_config.json'), 'w') as f:
    json.dump({'eos_token_id': [2, 5]}, f)
  assert HFTokenizer(str(tmp_path)).stop_token_ids == [2, 5]


def test_hf_errors_name_the_fix(hf_dir, tmp_path):
  with pytest.raises(ValueError, match='not a local directory'):
    HFTokenizer(str(tmp_path / 'missing'))
  with pytest.raises(ValueError, match="stop string 'be brief'"):
    HFTokenizer(hf_dir, stop_strings=['be brief'])


def test_hf_save_load_and_load_tokenizer(hf_dir, tmp_path):
  tok = load_tokenizer(_tokenizer_config(kind='hf', path=hf_dir, chat_template=True,
                                         system_prompt='be brief .'))
  assert isinstance(tok, HFTokenizer)
  tok.save(str(tmp_path))
  assert os.path.exists(os.path.join(tmp_path, tokenizer_lib.HF_SETTINGS_FILE))
  loaded = load_saved_tokenizer(str(tmp_path))
  assert isinstance(loaded, HFTokenizer) and loaded.chat_template
  assert loaded.encode_prompt('what is 2 + 3 ?') == tok.encode_prompt('what is 2 + 3 ?')


def test_load_saved_tokenizer_empty_dir(tmp_path):
  with pytest.raises(ValueError, match='neither'):
    load_saved_tokenizer(str(tmp_path))


def test_hf_decode_of_ids_past_the_vocabulary_is_replaced_not_raised(hf_dir):
  tok = HFTokenizer(hf_dir)
  ids = tok.encode('what is 2 + 3 ?')
  text = tok.decode(ids + [len(tok.tok) + 5] + ids)
  assert text.count(UNKNOWN_CHAR) == 1
  assert text.startswith(tok.decode(ids))


# Qwen3's chat template, reduced to the parts a one-turn prompt uses; the generation-prompt
# block (the `enable_thinking` switch) is as in Qwen/Qwen3-*'s tokenizer_config.json.
QWEN3_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role == 'user' %}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")


@pytest.fixture(scope='module')
def qwen3_dir(tmp_path_factory):
  """A Qwen3-style tokenizer: no BOS, EOS '<|im_end|>', <think> tokens, Qwen3's template."""
  from tokenizers import Tokenizer, models, pre_tokenizers
  from transformers import PreTrainedTokenizerFast

  specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>', '<think>', '</think>', '<unk>']
  words = ['what', 'is', '2', '+', '3', '?', '5', 'user', 'system', 'assistant', 'be', 'brief',
           '.']
  core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(specials + words)},
                                    unk_token='<unk>'))
  core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  fast = PreTrainedTokenizerFast(tokenizer_object=core, eos_token='<|im_end|>',
                                 pad_token='<|endoftext|>', unk_token='<unk>',
                                 additional_special_tokens=['<|im_start|>', '<think>', '</think>'])
  fast.chat_template = QWEN3_TEMPLATE
  directory = str(tmp_path_factory.mktemp('qwen3_tok'))
  fast.save_pretrained(directory)
  return directory


@pytest.mark.parametrize('enable_thinking, tail', [
    (True, '<|im_start|>assistant\n'),
    (False, '<|im_start|>assistant\n<think>\n\n</think>\n\n'),
])
def test_qwen3_template_thinking_switch(qwen3_dir, tmp_path, enable_thinking, tail):
  tok = load_tokenizer(_tokenizer_config(kind='hf', path=qwen3_dir, chat_template=True,
                                         system_prompt='be brief .',
                                         enable_thinking=enable_thinking))
  text = tok.prompt_text('what is 2 + 3 ?')
  assert text == ('<|im_start|>system\nbe brief .<|im_end|>\n<|im_start|>user\n'
                  'what is 2 + 3 ?<|im_end|>\n' + tail)
  ids = tok.encode_prompt('what is 2 + 3 ?')
  assert tok.bos_id is None and ids[0] == tok.encode('<|im_start|>')[0]  # no BOS prepended
  think, end_think = tok.encode('<think>')[0], tok.encode('</think>')[0]
  assert ids[-2:] == ([think, end_think] if not enable_thinking
                      else tok.encode('<|im_start|> assistant'))
  assert tok.stop_token_ids == [tok.encode('<|im_end|>')[0]]
  tok.save(str(tmp_path))  # the switch survives save / load next to a run
  assert load_saved_tokenizer(str(tmp_path)).encode_prompt('what is 2 + 3 ?') == ids


def test_hf_chat_messages_go_through_the_template(hf_dir):
  messages = ({'role': 'system', 'content': 'be brief .'},
              {'role': 'user', 'content': 'what is 2 + 3 ?'})
  expected = ('<|im_start|>system be brief .<|im_end|> <|im_start|>user what is 2 + 3 ?'
              '<|im_end|> <|im_start|>assistant ')
  plain = HFTokenizer(hf_dir)  # chat_template=False: strings stay raw, messages do not
  assert plain.prompt_text('what is 2 + 3 ?') == 'what is 2 + 3 ?'
  assert plain.prompt_text(messages) == expected
  assert plain.encode_prompt(messages) == [plain.bos_id] + plain.encode(expected)
  # The configured system prompt goes first unless the messages bring their own.
  with_system = HFTokenizer(hf_dir, system_prompt='be brief .')
  assert with_system.prompt_text(messages[1:]) == expected
  own = ({'role': 'system', 'content': 'the answer'},) + messages[1:]
  assert with_system.prompt_text(own).startswith('<|im_start|>system the answer<|im_end|>')


def test_chat_messages_without_a_template_are_refused(hf_dir, tmp_path):
  messages = ({'role': 'user', 'content': 'what is 2 + 3 ?'},)
  with pytest.raises(ValueError, match='needs a chat template: set tokenizer.kind=hf'):
    CharTokenizer().encode_prompt(messages)
  tok = HFTokenizer(hf_dir)
  tok.tok.chat_template = None
  with pytest.raises(ValueError, match='has none; add one to its tokenizer_config.json'):
    tok.encode_prompt(messages)
