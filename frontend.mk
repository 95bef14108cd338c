# The Numerics tab's frontend (included by the Makefile).
#   make frontend        install the locked npm packages, type-check, check formatting
#                        (prettier; `npm run format` fixes it), bundle into tandv_tb/static
#   make frontend-check  bundle into a temporary folder and fail if it differs from the
#                        committed tandv_tb/static (the bundle is committed so that
#                        `pip install` needs no Node.js)
FRONTEND_DIR := tandv_tb_frontend
FRONTEND_STATIC := tandv_tb/static
NPM_FLAGS := --no-audit --no-fund --loglevel=error

.PHONY: frontend frontend-deps frontend-check

frontend-deps:
	@command -v node >/dev/null || { echo "frontend: Node.js >= 18 is needed (https://nodejs.org)"; exit 1; }
	cd $(FRONTEND_DIR) && npm ci --prefer-offline $(NPM_FLAGS)

frontend: frontend-deps
	cd $(FRONTEND_DIR) && npm run --silent typecheck && npm run --silent lint
	cd $(FRONTEND_DIR) && node build.mjs ../$(FRONTEND_STATIC)

frontend-check: frontend-deps
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	(cd $(FRONTEND_DIR) && npm run --silent typecheck && npm run --silent lint && \
		node build.mjs "$$tmp") && \
	if diff -r "$$tmp" $(FRONTEND_STATIC) >/dev/null; then \
		echo "frontend-check: tandv_tb/static matches a fresh build"; \
	else \
		diff -rq "$$tmp" $(FRONTEND_STATIC); \
		echo "frontend-check: tandv_tb/static is stale: run 'make frontend' and commit it"; exit 1; \
	fi
