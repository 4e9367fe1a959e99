"""Readers (JSONL, Parquet, TFDS, HF datasets) -> identical Query records; bad-row handling."""

import json
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(TESTS, 'fixtures'))

from tiny_tfds import TEST_ROWS, TRAIN_ROWS, TinyQueries  # noqa: E402

from sgpo_jax.configs.default import get_config  # noqa: E402
from sgpo_jax.data.loading import LoadReport, Query, load_queries, load_queries_with_report  # noqa: E402
from sgpo_jax.data.tokenizer import CharTokenizer  # noqa: E402

EXPECTED_TRAIN = [Query(r['id'], r['prompt'], r['answer'], metadata={'level': r['level']})
                  for r in TRAIN_ROWS]


def _data_config(source, path, **overrides):
  config = get_config().data
  config.source = source
  config.path = str(path)
  config.update(overrides)
  return config


def _write_jsonl(path, rows):
  with open(path, 'w', encoding='utf-8') as f:
    for row in rows:
      f.write((row if isinstance(row, str) else json.dumps(row)) + '\n')


def _write_parquet(path, rows):
  import pyarrow as pa
  import pyarrow.parquet as pq

  pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture(scope='module')
def sources(tmp_path_factory):
  """{source: data.path} holding TRAIN_ROWS as 'train' and TEST_ROWS as 'test'."""
  import datasets

  root = tmp_path_factory.mktemp('data')
  paths = {}
  for source, writer, ext in (('jsonl', _write_jsonl, 'jsonl'),
                              ('parquet', _write_parquet, 'parquet')):
    directory = root / source
    directory.mkdir()
    writer(directory / f'train.{ext}', TRAIN_ROWS)
    writer(directory / f'test.{ext}', TEST_ROWS)
    paths[source] = directory
  hf_dir = root / 'hf'
  datasets.DatasetDict({'train': datasets.Dataset.from_list(TRAIN_ROWS),
                        'test': datasets.Dataset.from_list(TEST_ROWS)}).save_to_disk(str(hf_dir))
  paths['hf'] = hf_dir
  builder = TinyQueries(data_dir=str(root / 'tfds'), file_format='array_record')
  builder.download_and_prepare()
  paths['tfds'] = builder.data_dir
  return paths


@pytest.mark.parametrize('source', ['jsonl', 'parquet', 'tfds', 'hf'])
def test_all_readers_give_identical_queries(sources, source):
  config = _data_config(source, sources[source])
  assert load_queries(config, 'train') == EXPECTED_TRAIN
  assert load_queries(config, 'eval') == [Query('t1', '7*6?', '42', metadata={'level': 1})]


def test_single_files_and_hf_local_file(tmp_path):
  _write_jsonl(tmp_path / 'a.jsonl', TRAIN_ROWS)
  _write_parquet(tmp_path / 'a.parquet', TRAIN_ROWS)
  for source, path in (('jsonl', 'a.jsonl'), ('parquet', 'a.parquet'), ('hf', 'a.jsonl'),
                       ('hf', 'a.parquet')):
    config = _data_config(source, tmp_path / path, eval_path=str(tmp_path / path))
    assert load_queries(config, 'train') == EXPECTED_TRAIN, (source, path)
    assert load_queries(config, 'eval') == EXPECTED_TRAIN
  with pytest.raises(ValueError, match='set data.eval_path'):
    load_queries(_data_config('jsonl', tmp_path / 'a.jsonl'), 'eval')


def test_fields_renamed_numbers_converted_and_generated_ids(tmp_path):
  rows = [{'question': 'q?', 'solution': 72}, {'question': 'r?', 'solution': 2.5},
          {'question': 's?', 'solution': 3.0}]
  _write_jsonl(tmp_path / 'train.jsonl', rows)
  config = _data_config('jsonl', tmp_path, id_field='', prompt_field='question',
                        answer_field='solution')
  queries = load_queries(config, 'train')
  assert [(q.id, q.answer) for q in queries] == [('train-1', '72'), ('train-2', '2.5'),
                                                 ('train-3', '3')]


def test_jsonl_answers_are_kept_as_written_in_a_mixed_column(tmp_path):
  # Why the JSONL reader is not datasets' json builder (loading.py's docstring): that one
  # infers one type for the column and returns '2.50' as 2.5 and '007' as 7.
  rows = [{'id': 'a', 'prompt': 'p?', 'answer': '2.50'}, {'id': 'b', 'prompt': 'q?', 'answer': 7},
          {'id': 'c', 'prompt': 'r?', 'answer': '007'}]
  _write_jsonl(tmp_path / 'train.jsonl', rows)
  queries = load_queries(_data_config('jsonl', tmp_path), 'train')
  assert [q.answer for q in queries] == ['2.50', '7', '007']


BAD_ROWS = [
    ('missing_field', {'id': 'x', 'prompt': 'p'}, "missing field 'answer'"),
    ('empty_prompt', {'id': 'x', 'prompt': '  ', 'answer': '1'}, "prompt field 'prompt' is empty"),
    ('bad_prompt', {'id': 'x', 'prompt': 5, 'answer': '1'}, 'not a string'),
    ('bad_answer', {'id': 'x', 'prompt': 'p', 'answer': [1, 2]}, 'answer field'),
    ('bad_answer', {'id': 'x', 'prompt': 'p', 'answer': True}, 'bool'),
    ('duplicate_id', {'id': 'q1', 'prompt': '1+1=', 'answer': '2'}, "duplicate id 'q1'"),
    ('unencodable_prompt', {'id': 'x', 'prompt': 'one+1=', 'answer': '2'}, "character 'o'"),
    ('invalid_json', '{"id": "x", "prompt": ', 'invalid JSON'),
    ('not_an_object', '[1, 2]', 'not an object'),
    ('prompt_too_long', {'id': 'x', 'prompt': '1234567+1=', 'answer': '1234568'},
     'max_prompt_len=8'),
    ('bad_difficulty', '{"id": "x", "prompt": "1+1=", "answer": "2", "difficulty": Infinity}',
     'difficulty is inf'),
]


@pytest.mark.parametrize('reason, bad_row, message', BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_bad_row_error_names_file_row_and_fix(tmp_path, reason, bad_row, message):
  good = {'id': 'q1', 'prompt': '1+2=', 'answer': '3'}
  _write_jsonl(tmp_path / 'train.jsonl', [good, bad_row, {**good, 'id': 'q9'}])
  path = str(tmp_path / 'train.jsonl')
  config = _data_config('jsonl', tmp_path)
  with pytest.raises(ValueError) as error:
    load_queries(config, 'train', tokenizer=CharTokenizer(), max_prompt_len=8)
  assert f'{path}:2: ' in str(error.value) and message in str(error.value)
  assert "bad_rows='skip'" in str(error.value)

  config.bad_rows = 'skip'
  queries = load_queries(config, 'train', tokenizer=CharTokenizer(), max_prompt_len=8)
  assert [q.id for q in queries] == ['q1', 'q9']
  report = queries.report
  assert isinstance(report, LoadReport)
  assert (report.rows_read, report.num_loaded, dict(report.skipped)) == (3, 2, {reason: 1})
  assert report.examples[0].startswith(f'{path}:2: ')


def test_a_line_that_is_not_utf8_is_that_lines_error_and_nan_difficulty_is_none(tmp_path):
  good = json.dumps({'id': 'q1', 'prompt': '1+2=', 'answer': '3', 'difficulty': float('nan')})
  (tmp_path / 'train.jsonl').write_bytes(good.encode() + b'\n{"id": "x\xff"}\n'
                                         + good.replace('q1', 'q9').encode() + b'\n')
  config = _data_config('jsonl', tmp_path)
  with pytest.raises(ValueError, match=r'train.jsonl:2: not UTF-8 at byte 9'):
    load_queries(config, 'train')
  config.bad_rows = 'skip'
  queries = load_queries(config, 'train')
  assert [q.id for q in queries] == ['q1', 'q9']
  assert queries[0].difficulty is None  # NaN: pandas' missing value, not a crash


def test_skip_counts_across_readers(sources, tmp_path):
  """The same two bad rows are reported at the same row numbers by every reader."""
  import datasets

  rows = [TRAIN_ROWS[0], {**TRAIN_ROWS[1], 'prompt': ''}, TRAIN_ROWS[2],
          {**TRAIN_ROWS[2], 'prompt': 'again'}]
  _write_jsonl(tmp_path / 'train.jsonl', rows)
  _write_parquet(tmp_path / 'train.parquet', rows)
  datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / 'hf'))
  for source, path in (('jsonl', tmp_path), ('parquet', tmp_path), ('hf', tmp_path / 'hf')):
    config = _data_config(source, path, bad_rows='skip')
    queries, report = load_queries_with_report(config, 'train')
    assert [q.id for q in queries] == ['q1', 'q3'], source
    assert dict(report.skipped) == {'empty_prompt': 1, 'duplicate_id': 1}, source
    assert [e.split(': ')[0].rsplit(':', 1)[1] for e in report.examples] == ['2', '4'], source


def test_source_and_split_errors(tmp_path):
  with pytest.raises(ValueError, match="split='validation'"):
    load_queries(get_config().data, 'validation')
  with pytest.raises(ValueError, match="data.source='csv'"):
    load_queries(_data_config('csv', tmp_path), 'train')
  with pytest.raises(ValueError, match='does not exist'):
    load_queries(_data_config('jsonl', tmp_path / 'nope'), 'train')
  with pytest.raises(ValueError, match='no train.jsonl'):
    load_queries(_data_config('jsonl', tmp_path), 'train')
  with pytest.raises(ValueError, match="data.bad_rows='drop'"):
    load_queries(_data_config('jsonl', tmp_path, bad_rows='drop'), 'train')


def test_tfds_missing_split_is_named(sources):
  with pytest.raises(ValueError, match="no split 'validation'"):
    load_queries(_data_config('tfds', sources['tfds'], split='validation'), 'train')


def test_all_rows_bad_raises_even_when_skipping(tmp_path):
  _write_jsonl(tmp_path / 'train.jsonl', [{'id': 'a', 'prompt': '', 'answer': '1'}])
  with pytest.raises(ValueError, match='no usable rows'):
    load_queries(_data_config('jsonl', tmp_path, bad_rows='skip'), 'train')


def test_os_path_of_report(tmp_path):
  _write_jsonl(tmp_path / 'train.jsonl', TRAIN_ROWS)
  report = load_queries(_data_config('jsonl', tmp_path), 'train').report
  assert report.location == str(tmp_path) and os.path.isdir(report.location)
  assert report.num_skipped == 0 and report.num_loaded == 3


CHAT_ROWS = [
    {'id': 'c1', 'answer': '5', 'prompt': [{'role': 'system', 'content': 'be brief'},
                                           {'role': 'user', 'content': '2+3?'}]},
    {'id': 'c2', 'answer': '4', 'prompt': [{'role': 'user', 'content': '2+2?'}]},
]
CHAT_PROMPTS = [({'role': 'system', 'content': 'be brief'}, {'role': 'user', 'content': '2+3?'}),
                ({'role': 'user', 'content': '2+2?'},)]


def test_chat_rows_load_as_messages_from_every_file_reader(tmp_path):
  import datasets

  _write_jsonl(tmp_path / 'chat.jsonl', CHAT_ROWS)
  _write_parquet(tmp_path / 'chat.parquet', CHAT_ROWS)
  datasets.Dataset.from_list(CHAT_ROWS).save_to_disk(str(tmp_path / 'chat_hf'))
  for source, path in (('jsonl', 'chat.jsonl'), ('parquet', 'chat.parquet'),
                       ('hf', 'chat_hf'), ('hf', 'chat.jsonl')):
    config = _data_config(source, tmp_path / path)
    queries = load_queries(config, 'train')
    assert [q.prompt for q in queries] == CHAT_PROMPTS, (source, path)
    assert [(q.id, q.answer) for q in queries] == [('c1', '5'), ('c2', '4')]
  # Plain string prompts beside them keep working.
  _write_jsonl(tmp_path / 'mixed.jsonl', CHAT_ROWS + [{'id': 'p', 'prompt': '1+1?', 'answer': 2}])
  assert load_queries(_data_config('jsonl', tmp_path / 'mixed.jsonl'), 'train')[2].prompt == '1+1?'


@pytest.mark.parametrize('message, error', [
    ({'content': '2+3?'}, "jsonl:2: prompt field 'prompt' message 1 has 'role' missing"),
    ({'role': 'user'}, "jsonl:2: prompt field 'prompt' message 1 has 'content' missing"),
    ({'role': 'user', 'content': 7}, "message 1 has 'content' int, not a string"),
    ('2+3?', 'message 1 is str, not a {role, content} object'),
])
def test_chat_row_without_role_or_content_names_the_row(tmp_path, message, error):
  rows = [CHAT_ROWS[1], dict(CHAT_ROWS[0], prompt=[CHAT_ROWS[0]['prompt'][0], message])]
  _write_jsonl(tmp_path / 'bad.jsonl', rows)
  with pytest.raises(ValueError, match=error) as info:
    load_queries(_data_config('jsonl', tmp_path / 'bad.jsonl'), 'train')
  assert 'bad.jsonl:2' in str(info.value) and '\n' not in str(info.value)


def test_chat_rows_need_a_tokenizer_with_a_chat_template(tmp_path):
  _write_jsonl(tmp_path / 'chat.jsonl', CHAT_ROWS)
  with pytest.raises(ValueError, match='chat.jsonl:1: prompt cannot be tokenized: a chat-format '
                     'prompt .* needs a chat template'):
    load_queries(_data_config('jsonl', tmp_path / 'chat.jsonl'), 'train',
                 tokenizer=CharTokenizer(), max_prompt_len=64)


def test_hub_dataset_id_offline_is_one_line(monkeypatch, tmp_path):
  """No network here: a Hub id reaches datasets.load_dataset and fails in one line."""
  import datasets
  import huggingface_hub

  from sgpo_jax.data import inputs, loading
  monkeypatch.setattr(huggingface_hub.constants, 'HF_HUB_OFFLINE', True)  # fail fast, no retries
  monkeypatch.setattr(datasets.config, 'HF_HUB_OFFLINE', True)
  monkeypatch.chdir(tmp_path)
  assert loading.is_hub_id('nobody/no-such-dataset') and loading.is_hub_id('gsm8k:main')
  assert not loading.is_hub_id('missing.jsonl') and not loading.is_hub_id('/abs/dir')
  config = _data_config('hf', 'nobody/no-such-dataset')
  full = get_config()
  full.data = config
  assert inputs.path_problems(full) == []  # the loader decides, not the path check
  with pytest.raises(ValueError, match="data.path='nobody/no-such-dataset' is no local path, so "
                     'it was read as a Hugging Face Hub dataset id.*ConnectionError') as info:
    load_queries(config, 'train')
  assert '\n' not in str(info.value)
  full.data.path = 'missing.jsonl'
  assert "data.path='missing.jsonl' does not exist" in inputs.path_problems(full)[0]


def test_jsonl_and_input_checks_read_through_epath(tmp_path, monkeypatch):
  """A non-local path (gs:// on a pod) goes through `loading.input_path` (etils.epath) for the
  existence checks, the split files and the rows; `fake://bucket` stands for a bucket here."""
  from etils import epath

  from sgpo_jax.data import inputs, loading
  _write_jsonl(tmp_path / 'train.jsonl', TRAIN_ROWS)
  _write_jsonl(tmp_path / 'test.jsonl', TRAIN_ROWS)
  seen = []

  def fake_bucket(path):
    seen.append(str(path))
    return epath.Path(str(path).replace('fake://bucket', str(tmp_path)))

  monkeypatch.setattr(loading, 'input_path', fake_bucket)
  config = _data_config('jsonl', 'fake://bucket')
  assert load_queries(config, 'train') == EXPECTED_TRAIN
  assert 'fake://bucket' in seen
  assert load_queries(_data_config('jsonl', 'fake://bucket/train.jsonl',
                                   eval_path='fake://bucket/test.jsonl'), 'eval') == EXPECTED_TRAIN
  with pytest.raises(ValueError, match="data path 'fake://bucket/none' does not exist"):
    load_queries(_data_config('jsonl', 'fake://bucket/none'), 'train')

  run = get_config()
  run.data.source, run.data.path = 'jsonl', 'fake://bucket'
  assert inputs.path_problems(run) == []
  run.data.eval_path = 'fake://bucket/missing.jsonl'
  assert inputs.path_problems(run) == [
      "data.eval_path='fake://bucket/missing.jsonl' does not exist; set "
      '--config.data.eval_path=/local/dir to the jsonl file or directory of the split.']
  # The HF checkpoint is read by transformers from local disk: a bucket path says so.
  run.data.eval_path = ''
  run.model.hf_path = 'fake://bucket/model'
  assert inputs.path_problems(run) == [
      "model.hf_path='fake://bucket/model' is not on local disk; copy it to every host first "
      '(gcloud storage cp -r fake://bucket/model /tmp/) and set --config.model.hf_path=/local/dir '
      'to that copy.']


def test_a_run_reads_eval_from_data_eval_split_by_name(tmp_path):
  """data.split / data.eval_split name dataset splits; the run loads the roles 'train' and
  'eval' from them (it passed the names as roles: eval_split='validation' failed and
  eval_split='train' with an eval file silently evaluated on the training rows)."""
  from sgpo_jax import train
  _write_jsonl(tmp_path / 'train.jsonl', [{'id': f't{i}', 'prompt': f'{i}+1=',
                                           'answer': str(i + 1)} for i in range(8)])
  _write_jsonl(tmp_path / 'validation.jsonl', [{'id': f'v{i}', 'prompt': f'{i}+2=',
                                                'answer': str(i + 2)} for i in range(4)])
  config = get_config('runlocal=1')
  config.model.d_model, config.model.n_layers, config.model.d_ff = 32, 1, 64
  config.model.n_heads, config.model.n_kv_heads, config.model.head_dim = 2, 1, 16
  config.data.source, config.data.path = 'jsonl', str(tmp_path)
  config.data.eval_split = 'validation'
  config.warm_start.steps = 0
  setup = train.setup(config, str(tmp_path / 'run'), show_progress=False)
  assert [q.id for q in setup.eval_queries] == ['v0', 'v1', 'v2', 'v3']
  assert len(setup.train_queries) == 8
  # Naming the training split for eval is refused: the held-out score would be on it.
  config.data.eval_split = 'train'
  with pytest.raises(ValueError, match=r"data.eval_split='train' of .* is the training split"):
    train.setup(config, str(tmp_path / 'run2'), show_progress=False)
