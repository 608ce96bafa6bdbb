# Two commands on a fresh machine: `make quickstart` and `make test`.
VENV ?= .venv

# glibc malloc keeps freed memory instead of returning it to the kernel after
# every step and faulting it back in (mallopt(3); a CPU run's system time
# drops by more than half: docs/benchmarks-history.md, "glibc malloc").
# tests/conftest.py sets the same for the test processes.
export MALLOC_TRIM_THRESHOLD_ ?= 4294967296
export MALLOC_TOP_PAD_ ?= 268435456
PY := $(VENV)/bin/python

# The core install (requirements.txt: the runtime and the ResNet quickstart);
# each model's quickstart adds its own pinned packages; `make test` (and
# `make venv`) installs everything, as CI does.
$(VENV)/.core: requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -r requirements.txt
	touch $@

EXTRAS := bert transformer ssd inference cloud predict minigo
$(addprefix $(VENV)/.,$(EXTRAS)): $(VENV)/.%: requirements-%.txt $(VENV)/.core
	$(VENV)/bin/pip install -q -r $<
	touch $@

# recbole's wheel is read for the MovieLens copy it ships, never installed
# (installed, its missing torch would trip every later pip install).
$(VENV)/.dlrm: requirements-dlrm.txt $(VENV)/.core
	$(VENV)/bin/pip download -q --no-deps -d $(VENV)/wheels -r $<
	touch $@

$(VENV)/.installed: requirements-test.txt $(addprefix $(VENV)/.,$(EXTRAS) dlrm)
	$(VENV)/bin/pip install -q -r requirements-test.txt
	touch $@

venv: $(VENV)/.installed

# TF Model Garden in its own environment, for benchmarks/versus_garden.py.
.venv-garden/.installed: requirements-garden.txt
	python3 -m venv .venv-garden
	.venv-garden/bin/pip install -q -r requirements-garden.txt
	touch $@

garden_venv: .venv-garden/.installed

# torch and torchvision in their own environment, for
# benchmarks/versus_torchvision.py.
.venv-torch/.installed: requirements-torch.txt
	python3 -m venv .venv-torch
	.venv-torch/bin/pip install -q -r requirements-torch.txt
	touch $@

torch_venv: .venv-torch/.installed

# MLCommons' v0.5 reference harness, for benchmarks/versus_mlcommons.py: its
# own environment with LoadGen 0.5 built from REFERENCE_DIR's loadgen/ (a
# checkout of mlcommons/inference at branch r0.5; r0.5's main.py calls
# LoadGen 0.5's API, which today's mlcommons-loadgen no longer has). pybind11
# comes from pip in place of the checkout's submodule.
.venv-mlcommons/.installed: requirements-mlcommons.txt
	python3 -m venv .venv-mlcommons
	.venv-mlcommons/bin/pip install -q -r requirements-mlcommons.txt
	touch $@

mlcommons_venv: .venv-mlcommons/.installed
	@test -f "$(REFERENCE_DIR)/loadgen/setup.py" || { echo "error: give REFERENCE_DIR=<a checkout of mlcommons/inference at branch r0.5>" >&2; exit 2; }
	rm -rf .venv-mlcommons/loadgen-r0.5 && cp -r "$(REFERENCE_DIR)/loadgen" .venv-mlcommons/loadgen-r0.5
	cd .venv-mlcommons/loadgen-r0.5 && CFLAGS="$$(../bin/python -m pybind11 --includes)" ../bin/pip install -q --no-build-isolation .

# A TPU VM's environment, built as the launcher builds it on every worker
# (tools/tpu_venv.py: tensorflow-tpu with its libtpu, every model's
# packages, TensorFlow-coupled ones with --no-deps), then checked: libtpu
# loads at `import tensorflow`, every module imports. `make tpu_check` also
# trains each quickstart a few steps in it (TensorFlow's CPU kernels;
# tests/tpu_env/); CI runs it after `make test`.
TPU_VENV ?= .venv-tpu

$(TPU_VENV)/.installed: requirements-tpu.txt requirements-tpu-nodeps.txt tools/tpu_venv.py
	python3 tools/tpu_venv.py --venv=$(TPU_VENV) --check
	touch $@

tpu_venv: $(TPU_VENV)/.installed

tpu_check: venv tpu_venv
	TPU_VENV=$(TPU_VENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal tests/tpu_env

# The calibration folder is the last file written (older data folders lack
# it: they are rebuilt).
data/quickstart/calibration/validation-00000-of-00001: | $(VENV)/.core
	$(PY) -m tools.build_quickstart_data --output_dir=data/quickstart

data: data/quickstart/calibration/validation-00000-of-00001

data/bert_quickstart/vocab.txt: | $(VENV)/.bert
	$(PY) -m tools.build_bert_quickstart_data --output_dir=data/bert_quickstart

bert_data: data/bert_quickstart/vocab.txt

bert_quickstart: $(VENV)/.bert bert_data
	$(PY) train.py --gin_file=gin/bert_quickstart.gin --model_dir=runs/bert_$$(date +%Y%m%d_%H%M%S)

data/transformer_quickstart/metadata.json: | $(VENV)/.transformer
	$(PY) -m tools.build_translation_data --quickstart --output_dir=data/transformer_quickstart

transformer_data: data/transformer_quickstart/metadata.json

transformer_quickstart: $(VENV)/.transformer transformer_data
	$(PY) train.py --gin_file=gin/transformer_quickstart.gin --model_dir=runs/transformer_$$(date +%Y%m%d_%H%M%S)

data/gnmt_quickstart/metadata.json: | $(VENV)/.transformer
	$(PY) -m tools.build_translation_data --quickstart --layout=pairs --output_dir=data/gnmt_quickstart

gnmt_data: data/gnmt_quickstart/metadata.json

gnmt_quickstart: $(VENV)/.transformer gnmt_data
	$(PY) train.py --gin_file=gin/gnmt_quickstart.gin --model_dir=runs/gnmt_$$(date +%Y%m%d_%H%M%S)

data/ssd_quickstart/calibration/categories.json: | $(VENV)/.ssd
	$(PY) -m tools.build_ssd_quickstart_data --output_dir=data/ssd_quickstart

ssd_data: data/ssd_quickstart/calibration/categories.json

ssd_quickstart: $(VENV)/.ssd ssd_data
	$(PY) train.py --gin_file=gin/ssd_quickstart.gin --model_dir=runs/ssd_$$(date +%Y%m%d_%H%M%S)

# Mask R-CNN's digits: the SSD canvases with each digit's ink as its mask
# in the records.
data/maskrcnn_quickstart/categories.json: | $(VENV)/.ssd
	$(PY) -m tools.build_ssd_quickstart_data --include_masks --calibration_canvases=0 --output_dir=data/maskrcnn_quickstart

maskrcnn_data: data/maskrcnn_quickstart/categories.json

maskrcnn_quickstart: $(VENV)/.ssd maskrcnn_data
	$(PY) train.py --gin_file=gin/maskrcnn_quickstart.gin --model_dir=runs/maskrcnn_$$(date +%Y%m%d_%H%M%S)

data/dlrm_quickstart/metadata.json: | $(VENV)/.dlrm
	$(PY) -m tools.build_dlrm_quickstart_data --output_dir=data/dlrm_quickstart

dlrm_data: data/dlrm_quickstart/metadata.json

dlrm_quickstart: $(VENV)/.dlrm dlrm_data
	$(PY) train.py --gin_file=gin/dlrm_quickstart.gin --model_dir=runs/dlrm_$$(date +%Y%m%d_%H%M%S)

# MiniGo needs no data: every generation's games are played by the run.
minigo_quickstart: $(VENV)/.minigo
	$(PY) train.py --gin_file=gin/minigo_quickstart.gin --model_dir=runs/minigo_$$(date +%Y%m%d_%H%M%S)

# MLPerf Inference v0.5's quickstarts: $(call v05_quickstart,NAME,DATA,FLAGS)
# trains gin/NAME_quickstart.gin to its target, exports it, quantizes it to
# INT8 on DATA/calibration (held out: never the accuracy set), then runs
# every scenario, FP32 and INT8, with v0.5's settings in short runs (FLAGS:
# a measurement, not a result; docs/inference.md).
#
# $(call v05_quickstart_finetuned,NAME,DATA,FLAGS) continues the run that
# met the target twice from its weights, with the same steps: in float
# (gin/NAME_finetune.gin: the FP32 model served) and quantization-aware
# (gin/NAME_qat.gin: the INT8 model's weights).
define v05_quickstart
	D=runs/$(1)_$$(date +%Y%m%d_%H%M%S) && G=gin/$(1)_quickstart.gin && \
	$(PY) train.py --gin_file=$$G --model_dir=$$D && \
	$(PY) -m tools.export_savedmodel --gin_file=$$G \
	  --checkpoint_dir=$$D --export_dir=$$D/saved && \
	$(call v05_int8_and_table,$$G,$$D,$$D,$(2),$(3))
endef

define v05_quickstart_finetuned
	D=runs/$(1)_$$(date +%Y%m%d_%H%M%S) && G=gin/$(1)_quickstart.gin && \
	I="--gin_param=INIT_CHECKPOINT='$$D'" && \
	$(PY) train.py --gin_file=$$G --model_dir=$$D && \
	for S in finetune qat; do \
	  $(PY) train.py --gin_file=gin/$(1)_$$S.gin "$$I" \
	    --model_dir=$$D/$$S && \
	  $(PY) -m tools.export_savedmodel --gin_file=gin/$(1)_$$S.gin "$$I" \
	    --checkpoint_dir=$$D/$$S --export_dir=$$D/$$S/saved || exit 1; \
	done && \
	$(call v05_int8_and_table,$$G,$$D/finetune,$$D/qat,$(2),$(3))
endef

# $(call v05_int8_and_table,GIN,FP32_RUN,INT8_RUN,DATA,FLAGS): INT8_RUN's
# export quantized, then served beside FP32_RUN's.
define v05_int8_and_table
	$(PY) -m tools.quantize_tflite --gin_file=$(1) \
	  --saved_model=$(3)/saved --calibration_dataset=$(4)/calibration \
	  --dataset=$(4) --output=$(3)/int8.tflite && \
	$(PY) -m inference.run --gin_file=$(1) \
	  --saved_model=$(2)/saved --tflite=$(3)/int8.tflite --dataset=$(4) \
	  --output_dir=$(2)/loadgen --scenario=all --settings=v0.5 $(5)
endef

# `mobilenet`: a MobileNet-v1 trained to 95% top-1 on the digits.
MOBILENET_LOADGEN ?= --min_duration_ms=1000 --min_query_count=200

mobilenet_quickstart: $(VENV)/.inference data
	$(call v05_quickstart,mobilenet,data/quickstart,$(MOBILENET_LOADGEN))

# `ssd-mobilenet`: an SSD-MobileNet-v1 trained to its target mAP on the
# digit canvases, then fine-tuned in float (FP32) and quantization-aware
# (INT8) (calibration: training canvases).
SSD_MOBILENET_LOADGEN ?= --min_duration_ms=1000 --min_query_count=100

ssd_mobilenet_quickstart: $(VENV)/.inference $(VENV)/.ssd ssd_data
	$(call v05_quickstart_finetuned,ssd_mobilenet,data/ssd_quickstart,$(SSD_MOBILENET_LOADGEN))

# MLPerf submission packages from quickstart runs (docs/submitting.md):
# five ResNet runs (seeds 0-4) packaged as an open-division CPU system and
# checked by MLCommons' package checker; the MobileNet quickstart's INT8
# model through every v0.5 scenario's submission runs, packaged and checked
# against v0.5's rules. inference.run exits 1 when a run is INVALID or an
# audit fails: the packager then says which (exit 2 stops here).
SUBMISSION_LOADGEN ?= --min_duration_ms=1000 --min_query_count=1024 --target_qps=100

submission_demo: $(VENV)/.inference data
	D=runs/submission_$$(date +%Y%m%d_%H%M%S) && \
	for S in 0 1 2 3 4; do \
	  $(PY) train.py --gin_file=gin/resnet_quickstart.gin --gin.SEED=$$S \
	    --model_dir=$$D/resnet/run_$$S || exit 1; \
	done && \
	$(PY) -m tools.package training $$D/resnet --output=$$D/training_package && \
	$(PY) -m mlperf_logging.package_checker $$D/training_package training 0.7.0 \
	  --log_output=$$D/package_checker.log && \
	G=gin/mobilenet_quickstart.gin && M=$$D/mobilenet && \
	$(PY) train.py --gin_file=$$G --model_dir=$$M && \
	$(PY) -m tools.export_savedmodel --gin_file=$$G --checkpoint_dir=$$M \
	  --export_dir=$$M/saved && \
	$(PY) -m tools.quantize_tflite --gin_file=$$G --saved_model=$$M/saved \
	  --calibration_dataset=data/quickstart/calibration \
	  --dataset=data/quickstart --output=$$M/int8.tflite && \
	{ $(PY) -m inference.run --gin_file=$$G --tflite=$$M/int8.tflite \
	  --dataset=data/quickstart --output_dir=$$M/submission_runs \
	  --scenario=submission --settings=v0.5 $(SUBMISSION_LOADGEN); \
	  test $$? -le 1; } && \
	$(PY) -m tools.package inference $$M/submission_runs \
	  --output=$$D/inference_package

quickstart: $(VENV)/.core data
	$(PY) train.py --gin_file=gin/resnet_quickstart.gin --model_dir=runs/quickstart_$$(date +%Y%m%d_%H%M%S)

# Two pytest-xdist workers (the suite's time on 2 cores is with them);
# TEST_WORKERS=auto uses every core, TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

# --durations: CI's log lists the slowest tests (the suite's budget is
# 15 minutes on 2 cores; docs/testing.md).
test: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=40 tests

test-fast: venv
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not slow" tests

.PHONY: venv garden_venv torch_venv mlcommons_venv tpu_venv tpu_check data mobilenet_quickstart ssd_mobilenet_quickstart bert_data transformer_data gnmt_data ssd_data maskrcnn_data dlrm_data quickstart bert_quickstart transformer_quickstart gnmt_quickstart ssd_quickstart maskrcnn_quickstart dlrm_quickstart minigo_quickstart submission_demo test test-fast
