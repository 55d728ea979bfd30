# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# what each target installs: requirements.txt for the stages and demos (make demo), and on
# top of it requirements-bench.txt (make bench) or requirements-dev.txt (make test, which
# includes the bench, compare and cluster files); a stamp each, so a switch installs only
# what is missing
STAMP  := $(VENV)/.installed-requirements
BENCH_STAMP := $(VENV)/.installed-requirements-bench
DEV_STAMP   := $(VENV)/.installed-requirements-dev
# the numba kernels, compiled once after the install (scripts/compile_kernels.py) and
# again when a module of algorithms/ changes, then built ahead of time (with the C
# compiler, where there is one); both kept beside the modules (algorithms/jit.py)
KERNELS := algorithms/__pycache__/.compiled-kernels
# test processes (pytest-xdist); CI has 2 cores
TEST_WORKERS ?= 2

.PHONY: demo test bench bench-scale bench-dedup-scale bench-corpus install clean-data

install: $(KERNELS)

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	@touch $(STAMP)

$(BENCH_STAMP): requirements-bench.txt $(STAMP)
	$(PY) -m pip install -q -r requirements-bench.txt
	@touch $@

$(DEV_STAMP): requirements-dev.txt requirements-bench.txt requirements-compare.txt \
              requirements-cluster.txt $(STAMP)
	$(PY) -m pip install -q -r requirements-dev.txt
	@touch $@

$(KERNELS): $(STAMP) $(wildcard algorithms/*.py)
	$(PY) scripts/compile_kernels.py
	@mkdir -p $(dir $@) && touch $@

# Every stage that exists, in pipeline order, on the bundled sample (data/sample/),
# with the two worked-example demos and the compression table where they belong, and
# report.py's HTML page of the whole run (data/report.html) last.
DEMO_STEPS := download_data clean dedup_exact dedup_minhash minhash_demo bpe_demo \
              train_tokenizer compare_tokenizers pack_parallel verify report
demo: $(KERNELS)
	@set -e; for s in $(DEMO_STEPS); do \
	  if [ -f $$s.py ]; then \
	    echo; echo "===== python $$s.py $$(./scripts/demo_args.sh $$s) ====="; \
	    $(PY) $$s.py $$(./scripts/demo_args.sh $$s); \
	  fi; \
	done

test: $(DEV_STAMP) $(KERNELS)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

# The benchmarks run on data/bench_corpus/: 1.1 GB of distinct real documents built from
# Debian documentation packages (and one npm package); see scripts/build_bench_corpus.py.
bench-corpus: $(BENCH_STAMP) $(KERNELS)
	@test -f data/bench_corpus/sources.json || $(PY) scripts/build_bench_corpus.py

bench: bench-corpus
	$(PY) bench/run_all.py

bench-scale: bench-corpus
	$(PY) bench/scale.py

# near-dedup past one machine on synthetic corpora of 1M, 10M and 100M documents (no
# corpus needed; about 30 GB of disk at 100M): docs/benchmarks.md
bench-dedup-scale: $(BENCH_STAMP) $(KERNELS)
	$(PY) bench/bench_dedup_scale.py

clean-data:
	rm -rf data/raw data/cleaned data/dedup_exact data/dedup data/tokenizer data/figures \
	  data/train.bin data/val.bin data/pack_manifest.json data/pack_report data/verify_report.md \
	  data/verify_report.json data/report.html \
	  data/logs data/download data/.*.partial data/.*.old data/.*.signals data/.*.signatures
