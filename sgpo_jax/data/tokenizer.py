"""Tokenizers: text <-> token ids for prompts, completions and stop tokens.

Owns two tokenizers with one interface (`encode`, `decode`, `encode_prompt`, `pad_id`,
`bos_id`, `eos_id`, `vocab_size`, `stop_token_ids`, `save`, `load`):

- `CharTokenizer`: the embedded arithmetic task's 15-symbol vocabulary
  (PAD=0, BOS=1, EOS=2, '0'..'9' = 3..12, '+' = 13, '=' = 14), no downloads.
- `HFTokenizer`: a local Hugging Face tokenizer directory via `AutoTokenizer`, with an
  optional chat template (system prompt + user turn + generation prompt) and the
  `enable_thinking` template switch (Qwen3: False pre-fills an empty <think></think> block).
  A chat-format prompt (a list of {role, content} messages) always goes through the template.

`load_tokenizer(config.tokenizer)` picks one; `load_saved_tokenizer(dir)` reads back what
`save(dir)` wrote next to a run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from sgpo_jax.tasks.query import Messages

CHAR_TOKENIZER_FILE = 'char_tokenizer.json'
HF_SETTINGS_FILE = 'sgpo_tokenizer.json'


UNKNOWN_CHAR = '\ufffd'


class CharTokenizer:
  """One token per character over a fixed alphabet; specials PAD=0, BOS=1, EOS=2."""

  PAD, BOS, EOS = 0, 1, 2
  DEFAULT_ALPHABET = '0123456789+='

  def __init__(self, alphabet: str = DEFAULT_ALPHABET):
    if len(set(alphabet)) != len(alphabet) or not alphabet:
      raise ValueError(f'alphabet={alphabet!r} must be non-empty with distinct characters')
    self.alphabet = alphabet
    self._char_to_id = {c: i + 3 for i, c in enumerate(alphabet)}
    self._id_to_char = {i: c for c, i in self._char_to_id.items()}

  @property
  def pad_id(self) -> int:
    return self.PAD

  @property
  def bos_id(self) -> int:
    return self.BOS

  @property
  def eos_id(self) -> int:
    return self.EOS

  @property
  def vocab_size(self) -> int:
    return 3 + len(self.alphabet)

  @property
  def stop_token_ids(self) -> list[int]:
    return [self.EOS]

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, without BOS/EOS."""
    ids = []
    for pos, char in enumerate(text):
      token = self._char_to_id.get(char)
      if token is None:
        raise ValueError(
            f'character {char!r} at position {pos} of {text[:40]!r} is not in the char '
            f'tokenizer alphabet {self.alphabet!r}; use tokenizer.kind=hf for free text')
      ids.append(token)
    return ids

  def encode_prompt(self, prompt_text: str | Messages) -> list[int]:
    """BOS + encode(prompt_text): what the sampler is fed."""
    if not isinstance(prompt_text, str):  # a ValueError: loaders report it as the row's
      raise ValueError(  # noqa: TRY004
          'a chat-format prompt (a list of messages) needs a chat template: set '
          'tokenizer.kind=hf and tokenizer.path to a tokenizer that has one')
    return [self.BOS] + self.encode(prompt_text)

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first EOS; PAD and BOS are skipped.

    Model output is untrusted: an id outside the vocabulary (the model's embedding table may
    be larger than the tokenizer) decodes to U+FFFD, which no checker accepts.
    """
    chars = []
    for token in ids:
      token = int(token)
      if token == self.EOS:
        break
      if token in (self.PAD, self.BOS):
        continue
      char = self._id_to_char.get(token)
      chars.append(UNKNOWN_CHAR if char is None else char)
    return ''.join(chars)

  def save(self, directory: str) -> str:
    """Writes `char_tokenizer.json` into `directory`; returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, CHAR_TOKENIZER_FILE)
    with open(path, 'w') as f:
      json.dump({'kind': 'char', 'alphabet': self.alphabet,
                 'specials': {'pad': self.PAD, 'bos': self.BOS, 'eos': self.EOS}}, f, indent=1)
    return path

  @classmethod
  def load(cls, directory: str) -> CharTokenizer:
    path = os.path.join(directory, CHAR_TOKENIZER_FILE)
    with open(path) as f:
      spec = json.load(f)
    if spec.get('kind') != 'char':
      raise ValueError(f'{path} has kind={spec.get("kind")!r}, expected "char"')
    return cls(spec['alphabet'])


class HFTokenizer:
  """A local Hugging Face tokenizer with the `CharTokenizer` interface.

  `pad_id` falls back to `eos_id` when the tokenizer has no pad token. `stop_token_ids` is
  EOS, plus `eos_token_id` from a `generation_config.json` in the same directory, plus each
  of `stop_strings` (each must be a single token).
  """

  def __init__(self, path: str, chat_template: bool = False, system_prompt: str = '',
               stop_strings: Sequence[str] = (), enable_thinking: bool = True):
    import transformers  # deferred: heavy; only tokenizer.kind='hf' needs it

    if not path or not os.path.isdir(path):
      raise ValueError(f'tokenizer.path={path!r} is not a local directory; save a tokenizer '
                       'there with save_pretrained (no downloads on these machines)')
    self.path = path
    self.tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    self.chat_template = bool(chat_template)
    self.system_prompt = system_prompt
    self.stop_strings = tuple(stop_strings)
    self.enable_thinking = bool(enable_thinking)
    if self.chat_template and not self.tok.chat_template:
      raise ValueError(f'tokenizer.chat_template=True but {path} has no chat template; '
                       'set tokenizer.chat_template=False or add one to tokenizer_config.json')
    if self.tok.eos_token_id is None:
      raise ValueError(f'tokenizer at {path} has no eos token; set eos_token in its config')
    self._stop_ids = self._resolve_stop_ids()

  def _resolve_stop_ids(self) -> list[int]:
    ids = [self.tok.eos_token_id]
    gen_path = os.path.join(self.path, 'generation_config.json')
    if os.path.exists(gen_path):
      with open(gen_path) as f:
        gen_eos = json.load(f).get('eos_token_id')
      ids += gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else []
    for stop in self.stop_strings:
      token_ids = self.tok.encode(stop, add_special_tokens=False)
      if len(token_ids) != 1:
        raise ValueError(f'stop string {stop!r} encodes to {len(token_ids)} tokens {token_ids}; '
                         'stop strings must be single tokens (add it as a special token)')
      ids.append(token_ids[0])
    return list(dict.fromkeys(int(i) for i in ids))

  @property
  def pad_id(self) -> int:
    pad = self.tok.pad_token_id
    return int(pad) if pad is not None else self.eos_id

  @property
  def bos_id(self) -> int | None:
    bos = self.tok.bos_token_id
    return int(bos) if bos is not None else None

  @property
  def eos_id(self) -> int:
    return int(self.tok.eos_token_id)

  @property
  def vocab_size(self) -> int:
    return len(self.tok)

  @property
  def stop_token_ids(self) -> list[int]:
    return list(self._stop_ids)

  def encode(self, text: str) -> list[int]:
    """Token ids of `text`, with no special tokens added."""
    return list(self.tok.encode(text, add_special_tokens=False))

  def prompt_text(self, prompt_text: str | Messages) -> str:
    """The prompt after templating. A string: through the chat template when
    `chat_template` is set (system prompt + one user turn), else unchanged. A list of
    messages (chat-format data): always through the chat template, with the system prompt
    first unless the messages begin with their own."""
    if isinstance(prompt_text, str):
      if not self.chat_template:
        return prompt_text
      messages = [{'role': 'user', 'content': prompt_text}]
    else:
      if not self.tok.chat_template:
        raise ValueError(f'a chat-format prompt (a list of messages) needs a chat template '
                         f'but the tokenizer at {self.path} has none; add one to its '
                         'tokenizer_config.json or store prompts as strings')
      messages = [dict(m) for m in prompt_text]
    if self.system_prompt and messages[0].get('role') != 'system':
      messages.insert(0, {'role': 'system', 'content': self.system_prompt})
    # tokenize=False: in transformers v5 tokenize=True returns a dict, not ids.
    # enable_thinking reaches the template as a variable: Qwen3's template then closes an
    # empty <think></think> block when it is False; templates that never read it ignore it.
    return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                        enable_thinking=self.enable_thinking)

  def encode_prompt(self, prompt_text: str | Messages) -> list[int]:
    """Templated prompt ids; BOS is prepended unless the template already starts with it."""
    ids = self.encode(self.prompt_text(prompt_text))
    if self.bos_id is not None and (not ids or ids[0] != self.bos_id):
      ids = [self.bos_id] + ids
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    """Text of `ids` up to the first stop token; special tokens are skipped.

    Ids past the tokenizer's vocabulary (model embedding tables are often padded, e.g.
    Qwen2.5's 151936 rows for ~151665 tokens) decode to U+FFFD rather than failing.
    """
    stops = set(self._stop_ids)
    size = len(self.tok)
    pieces, kept = [], []
    for token in ids:
      token = int(token)
      if token in stops:
        break
      if 0 <= token < size:
        kept.append(token)
      else:
        pieces.append(self.tok.decode(kept, skip_special_tokens=True) + UNKNOWN_CHAR)
        kept = []
    return ''.join(pieces) + self.tok.decode(kept, skip_special_tokens=True)

  def save(self, directory: str) -> str:
    """Saves the HF files plus `sgpo_tokenizer.json` (template settings); returns its path."""
    os.makedirs(directory, exist_ok=True)
    self.tok.save_pretrained(directory)
    path = os.path.join(directory, HF_SETTINGS_FILE)
    with open(path, 'w') as f:
      json.dump({'kind': 'hf', 'chat_template': self.chat_template,
                 'system_prompt': self.system_prompt, 'stop_strings': list(self.stop_strings),
                 'enable_thinking': self.enable_thinking},
                f, indent=1)
    return path

  @classmethod
  def load(cls, directory: str) -> HFTokenizer:
    settings_path = os.path.join(directory, HF_SETTINGS_FILE)
    settings: dict[str, Any] = {}
    if os.path.exists(settings_path):
      with open(settings_path) as f:
        settings = json.load(f)
    return cls(directory, chat_template=settings.get('chat_template', False),
               system_prompt=settings.get('system_prompt', ''),
               stop_strings=settings.get('stop_strings', ()),
               enable_thinking=settings.get('enable_thinking', True))


Tokenizer = CharTokenizer | HFTokenizer


def load_tokenizer(tokenizer_config: Any) -> Tokenizer:
  """Builds the tokenizer named by `config.tokenizer` (kind 'char' | 'hf')."""
  kind = tokenizer_config.kind
  if kind == 'char':
    return CharTokenizer()
  if kind == 'hf':
    return HFTokenizer(tokenizer_config.path, chat_template=tokenizer_config.chat_template,
                       system_prompt=tokenizer_config.system_prompt,
                       stop_strings=tuple(tokenizer_config.stop_strings),
                       enable_thinking=tokenizer_config.enable_thinking)
  raise ValueError(f"tokenizer.kind={kind!r} is not one of 'char', 'hf'")


def load_saved_tokenizer(directory: str) -> Tokenizer:
  """Reads back a tokenizer written by `save(directory)` (e.g. from a run's workdir)."""
  if os.path.exists(os.path.join(directory, CHAR_TOKENIZER_FILE)):
    return CharTokenizer.load(directory)
  if os.path.exists(os.path.join(directory, HF_SETTINGS_FILE)):
    return HFTokenizer.load(directory)
  raise ValueError(f'{directory} holds neither {CHAR_TOKENIZER_FILE} nor {HF_SETTINGS_FILE}; '
                   'save the tokenizer there with tokenizer.save(directory)')
