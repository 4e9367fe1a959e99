"""`Query`: one training or eval problem (the type data loaders produce and tasks score).

Its own module so `data` (loaders) and `tasks` (generators, rewards) both depend on it
without depending on each other.
"""

from __future__ import annotations

import dataclasses

# A chat prompt: {'role': ..., 'content': ...} messages, rendered by the chat template.
Messages = tuple[dict[str, str], ...]


@dataclasses.dataclass(frozen=True)
class Query:
  id: str
  prompt: str | Messages  # plain text, or chat messages (data/loading.py)
  answer: str
  difficulty: int | None = None
  metadata: dict = dataclasses.field(default_factory=dict)
