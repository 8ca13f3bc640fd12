//! The exactly-once journal: a command id runs once, even when delivered twice and across a
//! restart, and a repeated delivery gets the stored result.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::sync::Arc;

use breeze_agent::exec::{self, Executor};
use breeze_agent::journal::{Begin, Journal, RESTARTED_ERROR};
use breeze_agent::logship::LogControl;
use breeze_agent_proto::{Command, CommandKind, CommandOutcome, Interpreter, LogLevel};
use breeze_core::{ManualClock, SystemClock};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[tokio::test]
async fn same_id_twice_runs_once() {
    let state = tempfile::tempdir().unwrap();
    let clock = Arc::new(SystemClock);
    let journal = Journal::open(&state.path().join("journal"), clock.clone()).unwrap();
    let logs = Arc::new(LogControl::new(clock.clone(), LogLevel::Warn));
    let executor = Executor::new(state.path(), clock, logs);
    let marker = state.path().join("ran.txt");
    let command = Command {
        id: Uuid::now_v7(),
        timeout_secs: 30,
        output_cap_bytes: 1024,
        kind: CommandKind::Script {
            interpreter: Interpreter::Sh,
            body: format!("echo ran >> {}; echo hello", marker.display()),
            args: vec![],
        },
        protected_paths: Vec::new(),
    };
    let mut results = Vec::new();
    for _ in 0..2 {
        match journal.begin(command.id).unwrap() {
            Begin::Run => {
                let r = executor
                    .run(&command, CancellationToken::new(), exec::no_progress())
                    .await;
                journal.finish(&r).unwrap();
                results.push(r);
            }
            Begin::Done(r) => results.push(*r),
            Begin::Running => panic!("not running any more"),
        }
    }
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
    assert_eq!(results[0], results[1]);
    assert_eq!(results[1].stdout, "hello\n");

    // A new journal on the same directory (a restart) still knows the result.
    let again = Journal::open(&state.path().join("journal"), Arc::new(SystemClock)).unwrap();
    assert_eq!(
        again.begin(command.id).unwrap(),
        Begin::Done(Box::new(results[0].clone()))
    );
}

#[test]
fn running_repeat_is_ignored() {
    let state = tempfile::tempdir().unwrap();
    let journal = Journal::open(state.path(), Arc::new(SystemClock)).unwrap();
    let id = Uuid::now_v7();
    assert_eq!(journal.begin(id).unwrap(), Begin::Run);
    assert_eq!(journal.begin(id).unwrap(), Begin::Running);
    assert_eq!(journal.running(), vec![id]);
}

#[test]
fn started_without_result_across_restart_fails_and_never_reruns() {
    let state = tempfile::tempdir().unwrap();
    let id = Uuid::now_v7();
    {
        let journal = Journal::open(state.path(), Arc::new(SystemClock)).unwrap();
        assert_eq!(journal.begin(id).unwrap(), Begin::Run);
        // The process dies here: no finish().
    }
    let journal = Journal::open(state.path(), Arc::new(SystemClock)).unwrap();
    let recovered = journal.recover();
    assert_eq!(recovered.len(), 1);
    assert_eq!(recovered[0].command_id, id);
    assert_eq!(recovered[0].status, CommandOutcome::Failed);
    assert_eq!(recovered[0].error.as_deref(), Some(RESTARTED_ERROR));
    match journal.begin(id).unwrap() {
        Begin::Done(r) => assert_eq!(r.error.as_deref(), Some(RESTARTED_ERROR)),
        other => panic!("re-run after restart: {other:?}"),
    }
    // Once delivered, a restart does not send it again.
    journal.mark_delivered(id);
    let journal = Journal::open(state.path(), Arc::new(SystemClock)).unwrap();
    assert!(journal.recover().is_empty());
}

#[test]
fn begin_without_recover_also_reports_the_restart() {
    let state = tempfile::tempdir().unwrap();
    let id = Uuid::now_v7();
    let first = Journal::open(state.path(), Arc::new(SystemClock)).unwrap();
    assert_eq!(first.begin(id).unwrap(), Begin::Run);
    let second = Journal::open(state.path(), Arc::new(SystemClock)).unwrap();
    match second.begin(id).unwrap() {
        Begin::Done(r) => assert_eq!(r.status, CommandOutcome::Failed),
        other => panic!("{other:?}"),
    }
}

#[test]
fn old_entries_are_pruned() {
    let state = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap());
    let journal = Journal::open(state.path(), Arc::new(clock.clone())).unwrap();
    let id = Uuid::now_v7();
    assert_eq!(journal.begin(id).unwrap(), Begin::Run);
    let now = breeze_core::Clock::now(&clock);
    let result = exec::failed(id, now, now, "x".into());
    journal.finish(&result).unwrap();
    assert_eq!(journal.prune(), 0);
    clock.advance(chrono::Duration::days(8));
    assert_eq!(journal.prune(), 1);
    assert_eq!(journal.begin(id).unwrap(), Begin::Run);
}
