"""The logdir and the TensorBoard apps (both loaders) that test_plugin_routes.py and
test_plugin_routes_http.py share: built once for the package, not once per module. A test
module of this package that defines its own ``logdir`` or ``tb`` uses that one."""

from __future__ import annotations

import pytest

from tests.helpers.plugin import STEPS, TensorBoardApp, write_logdir


@pytest.fixture(scope="package")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("logdir")
    layout = write_logdir(root, steps=STEPS)
    return root, layout


@pytest.fixture(scope="package", params=["python", "rust"])
def tb(request, logdir):
    app = TensorBoardApp(logdir[0], request.param)
    app.wait_for(tags=32, max_step=STEPS - 1)
    yield app
    app.close()
