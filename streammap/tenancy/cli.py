"""The tenancy commands: ``simulate``, ``serve``, and the job client (``submit``, ``queue``,
``status``, ``cancel``, ``logs``, ``result``)."""

from __future__ import annotations


def add_tenancy_parsers(sub) -> None:
    from .simulate import add_simulate_parser
    add_simulate_parser(sub)
