# TensorBoard, torch and jax compatibility (included by the Makefile; `make test` runs it).
#   make compat  runs the plugin's end-to-end test (a real `tensorboard`) against the
#                oldest TensorBoard the package allows and against the newest on PyPI, and
#                the trackers' tests on the floor and the newest torch and jax (below).
# Each TensorBoard is installed with its own requirements into .compat/tensorboard-<v>,
# which goes first on PYTHONPATH; the rest of the pinned stack (constraints.txt, less its
# tensorboard pin) stays, so the job tests the plugin, not a different numpy. The oldest job
# also takes the oldest protobuf the package allows. TensorBoard up to 2.20 imports
# pkg_resources, which setuptools 82 removed: a working install of it has an older
# setuptools, so the oldest job gets one too.
# TB_OLDEST and PROTOBUF_OLDEST are the floors in pyproject.toml
# (tests/project/test_tensorboard_version.py checks it).
TB_OLDEST := 2.17.1
PROTOBUF_OLDEST := 6.31.1
COMPAT := .compat
COMPAT_TEST := tests/project/test_tensorboard_version.py tests/plugin/test_plugin_e2e.py

.PHONY: compat compat-oldest compat-newest

compat: compat-oldest compat-newest

$(COMPAT)/constraints.txt: constraints.txt
	mkdir -p $(COMPAT)
	grep -v '^tensorboard==' constraints.txt > $@

$(COMPAT)/constraints-oldest.txt: $(COMPAT)/constraints.txt
	grep -v '^protobuf==' $< > $@

$(COMPAT)/tensorboard-$(TB_OLDEST)/.installed: $(COMPAT)/constraints-oldest.txt | $(INSTALLED)
	rm -rf $(@D)
	$(BIN)/pip install -q --target $(@D) -c $< "tensorboard==$(TB_OLDEST)" \
		"protobuf==$(PROTOBUF_OLDEST)" "setuptools<82"
	touch $@

compat-oldest: $(COMPAT)/tensorboard-$(TB_OLDEST)/.installed
	TANDV_EXPECT_TENSORBOARD=$(TB_OLDEST) TANDV_EXPECT_PROTOBUF=$(PROTOBUF_OLDEST) \
		PYTHONPATH=$(CURDIR)/$(<D) \
		$(BIN)/python -m pytest -q -rP -p no:cacheprovider $(COMPAT_TEST)

# The newest is looked up at each run (pip's index): that is the point of the job.
compat-newest: $(COMPAT)/constraints.txt | $(INSTALLED)
	newest=$$($(BIN)/python -m pip index versions tensorboard 2>/dev/null \
		| sed -n 's/^tensorboard (\(.*\))$$/\1/p') && \
	{ test -n "$$newest" || { echo "compat: no tensorboard version found on the index"; exit 1; }; } && \
	dir=$(COMPAT)/tensorboard-$$newest && \
	{ test -f $$dir/.installed || { rm -rf $$dir && \
		$(BIN)/pip install -q --target $$dir -c $< "tensorboard==$$newest" && \
		touch $$dir/.installed; }; } && \
	TANDV_EXPECT_TENSORBOARD=$$newest PYTHONPATH=$(CURDIR)/$$dir \
		$(BIN)/python -m pytest -q -rP -p no:cacheprovider $(COMPAT_TEST)

# -- torch and jax (issue 47): the floors and the newest releases ---------------------------
# Each framework version gets a fresh virtual environment .compat/<framework>-<version>,
# with the package installed editable (the tree under test), the rest of the stack from
# constraints.txt less the framework's own pins, and only what its tests need. An
# environment is reused while the pins it was built with (written into its .installed)
# match. The downloads are kept in COMPAT_WHEELS, outside the clone (the torch wheels on
# PyPI are CUDA builds of several GB, run here on the CPU; pip's own cache keeps none of
# them on this machine): `pip download` fetches what it lacks from the registry, and the
# install takes the wheels from there. The machine's pip constraint caps torch at the build
# on its disk: these jobs lift it (PIP_CONSTRAINT), that is their point.
# TORCH_FLOOR, JAX_FLOOR and FLAX_FLOOR are the floors in pyproject.toml
# (tests/project/test_framework_versions.py checks it; docs/support.md says why they are
# where they are).
TORCH_FLOOR := 2.5.0
JAX_FLOOR := 0.7.0
FLAX_FLOOR := 0.11.0
COMPAT_TOOLS := pytest pytest-timeout
COMPAT_WHEELS ?= $(HOME)/.cache/tandv_tb/compat-wheels
# Per environment: the trackers' tests, one compiled (torch.compile, jax.jit) model, the
# plugin end to end, and the checks that the environment holds what it was asked for.
COMPAT_COMMON := tests/project/test_framework_versions.py tests/plugin/test_plugin_e2e.py
COMPAT_TORCH := $(COMPAT_COMMON) tests/trackers/torch/test_torch_track.py \
	tests/trackers/torch/test_torch_attach.py tests/trackers/torch/test_framework_features.py \
	"tests/trackers/torch/test_torch_compile.py::test_nanogpt_trains_bitwise_unchanged_with_one_graph_per_variant"
COMPAT_JAX := $(COMPAT_COMMON) tests/trackers/jax/test_jax_track.py \
	tests/trackers/jax/test_jax_track_optimizers.py \
	tests/trackers/jax/test_jax_attach.py tests/trackers/jax/test_jax_nnx.py \
	tests/trackers/jax/test_framework_features.py

.PHONY: compat-frameworks compat-torch-floor compat-torch-newest compat-jax-floor \
	compat-jax-newest

compat: compat-frameworks
compat-frameworks: compat-torch-floor compat-torch-newest compat-jax-floor compat-jax-newest

$(COMPAT)/constraints-frameworks.txt: constraints.txt
	mkdir -p $(COMPAT)
	grep -vE '^(torch|torchao|triton|jax|jaxlib|flax|optax)==' constraints.txt > $@

# $(call compat_env,DIR,REQUIREMENTS): DIR holds a venv with the package and REQUIREMENTS,
# built anew unless DIR/.installed names the same requirements, constraints and pyproject.
define compat_env
{ pins="$(2) $$(cat $(COMPAT)/constraints-frameworks.txt pyproject.toml | md5sum | cut -c1-12)"; \
if [ "$$(cat $(1)/.installed 2>/dev/null)" != "$$pins" ]; then \
	rm -rf $(1) && $(PYTHON) -m venv $(1) && \
	PIP_CONSTRAINT=/dev/null $(1)/bin/pip download -q -d $(COMPAT_WHEELS) \
		-c $(COMPAT)/constraints-frameworks.txt $(2) && \
	PIP_CONSTRAINT=/dev/null $(1)/bin/pip install -q --find-links $(COMPAT_WHEELS) \
		-c $(COMPAT)/constraints-frameworks.txt -e . $(COMPAT_TOOLS) $(2) && \
	echo "$$pins" > $(1)/.installed; \
fi; }
endef

# $(call newest,PACKAGE): the newest release of PACKAGE on the index (looked up at each run).
newest = $$($(BIN)/python -m pip index versions $(1) 2>/dev/null | sed -n 's/^$(1) (\(.*\))$$/\1/p')

compat-torch-floor: $(COMPAT)/constraints-frameworks.txt | $(INSTALLED)
	$(call compat_env,$(COMPAT)/torch-$(TORCH_FLOOR),torch==$(TORCH_FLOOR))
	TANDV_EXPECT_TORCH=$(TORCH_FLOOR) $(COMPAT)/torch-$(TORCH_FLOOR)/bin/python -m pytest \
		-q -p no:cacheprovider $(COMPAT_TORCH)

compat-torch-newest: $(COMPAT)/constraints-frameworks.txt | $(INSTALLED)
	torch=$(call newest,torch) && test -n "$$torch" && \
	$(call compat_env,$(COMPAT)/torch-$$torch,torch==$$torch) && \
	TANDV_EXPECT_TORCH=$$torch $(COMPAT)/torch-$$torch/bin/python -m pytest \
		-q -p no:cacheprovider $(COMPAT_TORCH)

compat-jax-floor: $(COMPAT)/constraints-frameworks.txt | $(INSTALLED)
	$(call compat_env,$(COMPAT)/jax-$(JAX_FLOOR),jax==$(JAX_FLOOR) jaxlib==$(JAX_FLOOR) \
		flax==$(FLAX_FLOOR) optax)
	TANDV_EXPECT_JAX=$(JAX_FLOOR) TANDV_EXPECT_FLAX=$(FLAX_FLOOR) \
		$(COMPAT)/jax-$(JAX_FLOOR)/bin/python -m pytest -q -p no:cacheprovider $(COMPAT_JAX)

# jax's own requirement picks its jaxlib (a jax release may come without a jaxlib of its
# number).
compat-jax-newest: $(COMPAT)/constraints-frameworks.txt | $(INSTALLED)
	jax=$(call newest,jax) && flax=$(call newest,flax) && test -n "$$jax" -a -n "$$flax" && \
	$(call compat_env,$(COMPAT)/jax-$$jax,jax==$$jax flax==$$flax optax) && \
	TANDV_EXPECT_JAX=$$jax TANDV_EXPECT_FLAX=$$flax $(COMPAT)/jax-$$jax/bin/python -m pytest \
		-q -p no:cacheprovider $(COMPAT_JAX)
