# Two commands do all set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-requirements

.PHONY: demo test bench install clean-data

install: $(STAMP)

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	@touch $(STAMP)

# Every stage that exists, in pipeline order, on the bundled sample (data/sample/).
DEMO_STAGES := download_data clean dedup_exact dedup_minhash train_tokenizer pack_parallel verify
demo: $(STAMP)
	@set -e; for s in $(DEMO_STAGES); do \
	  if [ -f $$s.py ]; then \
	    echo; echo "===== $$s.py ====="; \
	    $(PY) $$s.py $$( \
	      case $$s in download_data) echo "--dataset sample";; train_tokenizer) echo "--vocab-size 8000";; esac ); \
	  fi; \
	done

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) bench/run_all.py

clean-data:
	rm -rf data/raw data/cleaned data/dedup_exact data/dedup data/minhash data/tokenizer \
	  data/train.bin data/val.bin data/pack_manifest.json data/logs data/.*.partial
