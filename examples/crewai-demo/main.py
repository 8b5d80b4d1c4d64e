"""A CrewAI crew coordinating through ZeroLock, with no model to pay for.

Two researcher Agents hold the ZeroLock tools (read_shard, commit_shard,
claim_task). Each runs in its own thread and makes the tool calls a model would
make: claim a topic (a lost race is an answer: pick another), then add a finding
to a shared decision shard (a stale version is an answer: read again, retry).
Every topic is researched once and no finding is lost.

Needs the crewai extra: pip install -e ".[crewai]". To hand the same tools to a
real crew, give the Agents an llm and call Crew(agents=..., tasks=...).kickoff()."""

from __future__ import annotations

import json
import os
import threading
import uuid

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # this demo sends nothing out
# CrewAI 1.6 (the newest beside the server's mcp 2.x) builds a default LLM when an
# Agent is made, and that wants a key. This demo calls the tools itself and runs
# no model, so any value does; give your own for a real crew.
os.environ.setdefault("OPENAI_API_KEY", "sk-unused-by-this-demo")

from crewai import Agent  # noqa: E402

from zerolock_sdk import CreateShardOptions, SyncZeroLockClient  # noqa: E402
from zerolock_sdk.crewai import create_zerolock_tools  # noqa: E402

TOPICS = ["crdt-merge", "occ-retries", "approval-gates", "lease-fencing"]


def researcher(name: str) -> Agent:
    return Agent(
        role=name,
        goal="research unclaimed topics and record findings",
        backstory="a careful researcher that never duplicates a colleague's work",
        tools=create_zerolock_tools(agent_id=name),  # $ZEROLOCK_URL, $ZEROLOCK_API_KEY
    )


def call(agent: Agent, tool: str, **arguments: object) -> dict:
    """One tool call, as CrewAI makes it for a model: by name, with arguments."""
    return json.loads(next(t for t in agent.tools if t.name == tool).run(**arguments))


def work(agent: Agent, queue: str, findings: str, retries: list[int]) -> None:
    for topic in TOPICS:
        if not call(agent, "claim_task", shard_id=queue, task_id=topic)["claimed"]:
            continue  # someone else has it
        while True:
            shard = call(agent, "read_shard", shard_id=findings)
            new_value = {**shard["value"], topic: f"notes on {topic} by {agent.role}"}
            answer = call(
                agent,
                "commit_shard",
                shard_id=findings,
                new_value=new_value,
                expected_version=shard["version"],
            )
            if answer["committed"]:
                break
            retries.append(1)  # a colleague wrote first: re-read and merge


def main() -> None:
    run = uuid.uuid4().hex[:6]
    queue, findings = f"example.crew.{run}.topics", f"example.crew.{run}.findings"
    with SyncZeroLockClient(agent_id="crew-setup") as zl:
        tasks = {topic: {"status": "pending"} for topic in TOPICS}
        zl.create_shard(queue, CreateShardOptions(initial_value=tasks))
        zl.create_shard(findings, CreateShardOptions(initial_value={}))
        crew = [researcher("researcher-a"), researcher("researcher-b")]
        retries: list[int] = []
        threads = [
            threading.Thread(target=work, args=(agent, queue, findings, retries)) for agent in crew
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for agent in crew:
            agent.tools[0].client.close()
        holders = {t: v["holder"] for t, v in zl.get_shard(queue).value.items()}
        notes = zl.get_shard(findings).value
    print(f"topics claimed: {len(holders)}/{len(TOPICS)}, by {sorted(set(holders.values()))}")
    print(f"findings recorded: {len(notes)}/{len(TOPICS)} (stale commits retried: {len(retries)})")
    for topic in TOPICS:
        print(f"  {topic}: {notes[topic]}")


if __name__ == "__main__":
    main()
