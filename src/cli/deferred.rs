//! Subcommands whose arguments clap builds only when the command line names them.
//!
//! clap's derive builds the whole command tree before it parses: every subcommand's
//! every argument, help text and value parser. With `serve`, `gateway` and `session`
//! beside `run`, that was a tenth of a millisecond of CPU and some 20 pages of heap at
//! every jail's start (docs/performance.md). `Command::defer` has clap build a
//! subcommand's arguments when it parses that subcommand or renders its help.
//! Completion scripts and man pages walk the whole tree, `help SUBCOMMAND` included, so
//! they ask for it [`built_whole`].

use clap::{ArgMatches, Args, Command, Error, FromArgMatches, Subcommand};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

static WHOLE: AtomicBool = AtomicBool::new(false);

/// The command tree with every subcommand's arguments built now, for what walks the whole
/// tree (clap derives `help SUBCOMMAND`'s children from subcommands as they are when
/// their parent is built).
pub fn built_whole<C: clap::CommandFactory>() -> Command {
    WHOLE.store(true, Ordering::Relaxed);
    C::command()
}

/// `augment` now, or when clap parses the subcommand.
fn when_needed(cmd: Command, augment: fn(Command) -> Command) -> Command {
    if WHOLE.load(Ordering::Relaxed) {
        augment(cmd)
    } else {
        cmd.defer(augment)
    }
}

/// A subcommand's arguments `T`, built when that subcommand is parsed.
#[derive(Debug)]
pub struct Deferred<T>(pub T);

impl<T> Deref for Deferred<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Deferred<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

impl<T: FromArgMatches> FromArgMatches for Deferred<T> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches(matches).map(Self)
    }
    fn from_arg_matches_mut(matches: &mut ArgMatches) -> Result<Self, Error> {
        T::from_arg_matches_mut(matches).map(Self)
    }
    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches(matches)
    }
    fn update_from_arg_matches_mut(&mut self, matches: &mut ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches_mut(matches)
    }
}

impl<T: Args> Args for Deferred<T> {
    fn augment_args(cmd: Command) -> Command {
        when_needed(cmd, T::augment_args)
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        when_needed(cmd, T::augment_args_for_update)
    }
}

impl<T: Subcommand> Subcommand for Deferred<T> {
    fn augment_subcommands(cmd: Command) -> Command {
        when_needed(cmd, T::augment_subcommands)
    }
    fn augment_subcommands_for_update(cmd: Command) -> Command {
        when_needed(cmd, T::augment_subcommands_for_update)
    }
    fn has_subcommand(name: &str) -> bool {
        T::has_subcommand(name)
    }
}

/// `brig serve`'s arguments, built when parsed, with the jail options' PROGRAM hidden
/// (a server runs its clients' programs, not one of its own).
#[derive(Debug)]
pub struct ServeArgs(pub Box<brig::serve::ServeArgs>);

impl Deref for ServeArgs {
    type Target = brig::serve::ServeArgs;
    fn deref(&self) -> &brig::serve::ServeArgs {
        &self.0
    }
}

impl FromArgMatches for ServeArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, Error> {
        brig::serve::ServeArgs::from_arg_matches(matches).map(|args| Self(Box::new(args)))
    }
    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), Error> {
        self.0.update_from_arg_matches(matches)
    }
}

impl Args for ServeArgs {
    fn augment_args(cmd: Command) -> Command {
        when_needed(cmd, |cmd| {
            brig::serve::ServeArgs::augment_args(cmd).mut_arg("command", |arg| arg.hide(true))
        })
    }
    fn augment_args_for_update(cmd: Command) -> Command {
        when_needed(cmd, |cmd| {
            brig::serve::ServeArgs::augment_args_for_update(cmd)
                .mut_arg("command", |arg| arg.hide(true))
        })
    }
}
