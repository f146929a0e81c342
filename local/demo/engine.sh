#!/usr/bin/env bash
# The demo engine `make demo` gives its two factories (FLEET_ENGINE_DEMO).
# It stands in for a coding agent: it makes one small visible change in the
# job's worktree (a line appended to CHANGELOG.md, which the factory commits
# and pushes to aq/job/<id> of the demo origin) and reports a made-up usage,
# so every page of the console and `fleetctl top` has something real to show.
# The job body picks a behaviour:
#   "demo: plan"       first run proposes two children (the second depends
#                      on the first); the run after they shipped does its
#                      own step
#   "demo: fail once"  the first run fails (exit 1); any later run succeeds
set -eu

prompt=$(cat "$FLEET_JOB_PROMPT_FILE")
chars=${#prompt}
# Usage grows with the body, so runs differ; written before any exit so a
# failed run shows its cost too.
printf '{"usd": 0.%02d, "inputTokens": %d, "outputTokens": %d}\n' \
	$((chars % 90 + 10)) $((chars * 37)) $((chars * 11)) >"$FLEET_JOB_USAGE_FILE"

sleep "${FLEET_DEMO_ENGINE_SECONDS:-2}"

case "$prompt" in
*"demo: plan"*)
	if [ -z "${FLEET_JOB_CHILDREN:-}" ]; then
		key="demo-notes-$FLEET_JOB_ID"
		printf -- '---\ntitle: Write the release notes\nrepo: %s\ncapabilities: [engine:demo]\nidempotencyKey: %s\n---\nWrite the release notes for 1.0.\n' \
			"$FLEET_JOB_REPO" "$key" >"$FLEET_JOB_CHILDREN_DIR/1-notes.md"
		printf -- '---\ntitle: Bump the version to 1.0\nrepo: %s\ncapabilities: [engine:demo]\ndeps: [%s]\n---\nBump the version once the notes are written.\n' \
			"$FLEET_JOB_REPO" "$key" >"$FLEET_JOB_CHILDREN_DIR/2-version.md"
		echo "planned two children: the notes, then the version bump"
		exit 0
	fi
	;;
*"demo: fail once"*)
	marker="${FLEET_DEMO_STATE:?}/failed-once-$FLEET_JOB_ID"
	if [ ! -e "$marker" ]; then
		: >"$marker"
		echo "failing on purpose: this job fails its first run and succeeds when retried" >&2
		exit 1
	fi
	;;
esac

echo "- $FLEET_JOB_TITLE (job $FLEET_JOB_ID, factory $FLEET_FACTORY_ID)" >>CHANGELOG.md
echo "appended a line to CHANGELOG.md"
