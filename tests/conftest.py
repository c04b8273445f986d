import pytest

from topl.launcher.compose import compose_job


@pytest.fixture
def compose():
    return compose_job
