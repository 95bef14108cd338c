# TensorBoard compatibility (included by the Makefile; `make test` runs it).
#   make compat  runs the plugin's end-to-end test (a real `tensorboard`) against the
#                oldest TensorBoard the package allows and against the newest on PyPI.
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
