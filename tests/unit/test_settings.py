"""The one settings mechanism (rollout.settings) and the one storage location model."""

from __future__ import annotations

import argparse

import pytest

from rollout.api.errors import Problem
from rollout.api.resources import RolloutTrialSpec, StorageSpec
from rollout.api.storage import StorageLocation
from rollout.settings import (
    COMMAND_LINE,
    ENVIRONMENT,
    ConfigFileValues,
    Setting,
    boolean,
    comma_list,
    resolve,
    seconds,
    whole_number,
)

COLOUR = Setting("colour", "APP_COLOUR", "--colour", key="look.colour", fallbacks=("COLOUR",))
COUNT = Setting("count", "APP_COUNT", "--count", parse=whole_number)
NAME = Setting("name", "APP_NAME", "--name", empty_is_a_value=True)
TAGS = Setting("tags", "APP_TAGS", "--tag", parse=comma_list, repeatable=True)
ALL = (COLOUR, COUNT, NAME, TAGS)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for setting in ALL:
        setting.add_flag(parser, show_variable=True)
    return parser.parse_args(list(argv))


def test_a_flag_wins_over_the_environment_which_wins_over_the_file_then_the_fallbacks() -> None:
    file = ConfigFileValues("app.yaml", {"colour": "green"})
    environ = {"APP_COLOUR": "red", "COLOUR": "blue"}
    flagged = resolve(ALL, environ, parse("--colour", "black"), file)
    assert (flagged.values["colour"], flagged.origins["colour"]) == (
        "black", (COMMAND_LINE, "--colour")
    )  # fmt: skip
    from_env = resolve(ALL, environ, parse(), file)
    assert from_env.origins["colour"] == (ENVIRONMENT, "APP_COLOUR")
    from_file = resolve(ALL, {"COLOUR": "blue", "APP_COLOUR": " "}, parse(), file)
    assert (from_file.values["colour"], from_file.origins["colour"]) == (
        "green", ("app.yaml", "look.colour")
    )  # fmt: skip
    fallback = resolve(ALL, {"COLOUR": "blue"}, parse())
    assert fallback.origins["colour"] == (ENVIRONMENT, "COLOUR")
    assert fallback.given("colour") is False  # a fallback is not the setting's own
    assert resolve(ALL, {}, parse()).values == {}


def test_empty_values_are_unset_unless_the_setting_says_otherwise() -> None:
    resolved = resolve(ALL, {"APP_COUNT": "", "APP_NAME": ""}, parse("--colour", ""))
    assert resolved.values == {"name": ""}
    assert resolve(ALL, {}, parse("--tag", "a", "--tag", "b,c")).values["tags"] == ["a", "b", "c"]


def test_a_bad_value_is_reported_where_it_was_written() -> None:
    resolved = resolve(ALL, {"APP_COUNT": "many"}, parse())
    assert resolved.problems == [Problem(ENVIRONMENT, "APP_COUNT", "'many' is not a whole number")]
    assert "count" not in resolved.values
    flagged = resolve(ALL, {"APP_COUNT": "1"}, parse("--count", "x"))
    assert flagged.problems == [Problem(COMMAND_LINE, "--count", "'x' is not a whole number")]
    # A value no source gave is reported at its variable.
    flagged.report("colour", "is required")
    assert flagged.problems[-1] == Problem(ENVIRONMENT, "APP_COLOUR", "is required")


@pytest.mark.parametrize(("text", "value"), [("1", True), ("Yes", True), ("off", False)])
def test_booleans(text: str, value: bool) -> None:
    assert boolean(text) is value


def test_parse_messages_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match="'maybe' is not true or false"):
        boolean("maybe")
    with pytest.raises(ValueError, match="'inf' must be a finite number of seconds, 0 or more"):
        seconds("inf")
    assert seconds("2.5") == 2.5


# --- the storage location -------------------------------------------------------------------------


def test_spec_storage_is_a_location_and_one_written_before_still_reads() -> None:
    written_before = {
        "bucket": "team",
        "prefix": "/a/b/",
        "endpoint": "http://s3.team:9000/",
        "pathStyle": True,
        "credentialsSecret": "team-s3",
    }
    spec = StorageSpec.model_validate(written_before)
    assert isinstance(spec, StorageLocation)
    assert (spec.prefix, spec.endpoint, spec.region) == ("a/b", "http://s3.team:9000", None)
    assert spec.signing_region == "us-east-1"
    assert spec.model_dump(mode="json", exclude_none=True) == {
        "bucket": "team",
        "prefix": "a/b",
        "endpoint": "http://s3.team:9000",
        "pathStyle": True,
        "credentialsSecret": "team-s3",
    }
    assert StorageSpec.model_validate({"bucket": "b", "endpoint": ""}).endpoint is None


def test_a_bad_location_in_a_trial_is_refused_when_the_trial_is_read() -> None:
    with pytest.raises(ValueError, match=r"storage\.endpoint\n.*must start with http://"):
        RolloutTrialSpec.model_validate({"storage": {"bucket": "b", "endpoint": "minio:9000"}})
