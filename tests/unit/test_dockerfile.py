"""Dockerfiles read without a build: Docker's syntax, and which ones lift to their FROM image."""

from __future__ import annotations

import pytest

from rollout.api.dockerfile import DockerfileError, Lift, lift, parse


def test_comments_continuations_and_case_are_read_as_docker_reads_them() -> None:
    text = (
        "# syntax=docker/dockerfile:1\n"
        "\n"
        "from ubuntu:24.04 AS base\n"
        "RUN apt-get update && \\\n"
        "    # a comment inside the instruction\n"
        "    apt-get install -y git\n"
        "workdir /app\n"
    )
    assert [(i.keyword, i.arguments, i.line) for i in parse(text)] == [
        ("FROM", "ubuntu:24.04 AS base", 3),
        ("RUN", "apt-get update &&  apt-get install -y git", 4),
        ("WORKDIR", "/app", 7),
    ]


def test_the_escape_directive_changes_the_continuation_character() -> None:
    text = "# escape=`\nFROM mcr.microsoft.com/windows `\n  AS win\n"
    assert [i.arguments for i in parse(text)] == ["mcr.microsoft.com/windows  AS win"]


@pytest.mark.parametrize(
    ("text", "lifted"),
    [
        ("FROM ubuntu:24.04\nWORKDIR /app\n", Lift("ubuntu:24.04", "/app")),
        ("FROM python:3.13-slim\n", Lift("python:3.13-slim")),
        # WORKDIR is relative to the one before; ENV in both forms; LABEL, CMD, EXPOSE: no change.
        (
            'FROM alpine:3.22 AS env\nWORKDIR /srv\nWORKDIR app\nENV A=1 B="two words"\n'
            'ENV LEGACY spaced value\nLABEL x=y\nEXPOSE 80\nCMD ["sh"]\n',
            Lift("alpine:3.22", "/srv/app", {"A": "1", "B": "two words", "LEGACY": "spaced value"}),
        ),
        ("ARG BASE=debian\nARG TAG=12\nFROM ${BASE}:$TAG\n", Lift("debian:12")),
    ],
)
def test_a_dockerfile_of_only_settings_lifts_to_its_from_image(text: str, lifted: Lift) -> None:
    assert lift(text) == lifted


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("FROM ubuntu\nRUN apt-get install -y git\n", "RUN at line 2 needs a build"),
        ("FROM ubuntu\nCOPY x /x\n", "COPY at line 2 needs a build"),
        ("FROM ubuntu\nUSER agent\n", "USER at line 2 needs a build"),
        ("FROM golang AS build\nFROM alpine\n", "FROM at line 2 starts a second stage"),
        ("FROM ubuntu\nENV PATH=/opt/bin:$PATH\n", "ENV at line 2 names a variable"),
        ("FROM ubuntu\nWORKDIR $HOME/app\n", "WORKDIR at line 2 names a variable"),
    ],
)
def test_anything_more_needs_a_build_and_says_which_line(text: str, why: str) -> None:
    result = lift(text)
    assert isinstance(result, str)
    assert result.startswith(why)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "no instructions"),
        ("# only a comment\n", "no instructions"),
        ("FORM ubuntu\n", "line 1: unknown instruction FORM"),
        ("WORKDIR /app\nFROM ubuntu\n", "line 1: WORKDIR before FROM"),
        ("ARG BASE\nFROM $BASE\n", "an ARG with no default before FROM"),
        ("FROM --platform=linux/arm64 ubuntu\n", "options (--platform)"),
        ("FROM scratch\n", "has no shell"),
        ('FROM ubuntu\nENV A="unterminated\n', "No closing quotation"),
        ("# escape=x\nFROM ubuntu\n", "escape directive"),
    ],
)
def test_what_docker_would_refuse_is_an_error_naming_the_line(text: str, said: str) -> None:
    with pytest.raises(DockerfileError, match=said.replace("(", r"\(").replace(")", r"\)")):
        lift(text)
