//! seccompiler's programs, laid out again compactly: the same answers in a fraction of the
//! instructions.
//!
//! seccompiler compiles a filter to the arch check, `ld nr`, then one block per system call
//! in ascending order, each starting with a header:
//!
//! ```text
//! i:   jeq NR, jt=0, jf=1    this call?
//! i+1: ja BODY               yes: its rules (argument checks ending in rets)
//! i+2: ja NEXT               no: (through the skip jumps of its further rules) the next header
//! ```
//!
//! and, after the last block, the filter's mismatch action (`ret`). Even a call without
//! argument checks takes five instructions, and the kernel pays for each of them whenever a
//! jail attaches the filter: it converts and JIT-compiles the program (linear in its
//! length), then runs it for every system call number to fill its action cache, walking on
//! average half the chain each time.
//!
//! [`compact`] keeps everything up to `ld nr` and puts in place of the chain:
//!
//! ```text
//! search   jge nodes, a binary search on the number down to its leaf
//! bodies   the blocks of the calls with argument checks, without their headers
//! rets     one `ret` per action, for the search and the bodies
//! ```
//!
//! The leaves are ranges of consecutive numbers with one answer, not calls: an allowlist's
//! plain calls come in a few dozen runs and the numbers between two runs all get the
//! mismatch action, so each run and each gap is one leaf. A leaf costs no instruction: its
//! node jumps straight to the shared `ret`, or to the body. A single number between two
//! ranges with the same answer (a call with argument checks amid allowed calls, a denied
//! one amid them) would cut a leaf in three; it is a `jeq` in that leaf instead.
//!
//! A body is copied whole, so its own relative jumps still hold. A jump out of it lands on
//! the chain's path for numbers no header matches: seccompiler's skip jumps toward the next
//! header (which a run from the body's start never takes) or the chain's end. On that path,
//! the later headers compare A with their larger numbers; while A is still the number none
//! matches and the answer is the mismatch action, so the copy jumps to its `ret`. A body
//! that may leave after changing A (other than for the chain's end, which answers whatever A
//! is), jumps anywhere else or falls off its end has no such place to go.
//!
//! Jumps only go forward, and the bodies jump to a `ret`, hence the order. The program is
//! built backwards, from its last `ret`, so that each jump is placed after its targets and
//! knows its offsets. A target beyond the 8 bits of jt and jf is reached through a `ja`
//! (32-bit offset) right after the node, which the nodes before it within reach share.
//!
//! Any program that does not have this shape is left as it is. This file is also compiled
//! into build.rs, which precompiles the built-in profiles; it depends on seccompiler only.

use seccompiler::sock_filter;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
/// BPF_CLASS(code) == BPF_JMP.
const CLASS_MASK: u16 = 0x07;
const CLASS_JMP: u16 = 0x05;
const CLASS_RET: u16 = 0x06;
/// `offsetof(struct seccomp_data, nr)`.
const NR_OFFSET: u32 = 0;
/// The kernel's BPF_MAXINSNS; the result stays below it, as seccompiler's programs do.
const MAX_INSNS: usize = 4096;
/// The longest conditional jump (jt and jf are 8-bit).
const MAX_SHORT: usize = u8::MAX as usize;

/// `program` laid out compactly, or `program` itself where [`compact`] declines.
pub fn optimize(program: &[sock_filter]) -> Vec<sock_filter> {
    compact(program).unwrap_or_else(|_| program.to_vec())
}

/// `program` with its chain replaced by a search over ranges; the error says why the
/// program is better left alone (an unexpected shape, too long a result).
pub fn compact(program: &[sock_filter]) -> Result<Vec<sock_filter>, String> {
    check_jumps(program)?;
    let load = program
        .iter()
        .position(|insn| insn.code == LD_W_ABS && insn.k == NR_OFFSET)
        .ok_or("no `ld nr`")?;
    // The prologue (the arch check) is kept as it is: it must not jump past `ld nr`, into
    // what is replaced.
    for index in 0..load {
        if let Some(targets) = jump_targets(program, index)
            && targets.iter().any(|&target| target > load)
        {
            return Err(format!("instruction {index} jumps past `ld nr`"));
        }
    }
    let chain = walk_chain(program, load + 1)?;
    let mismatch_action = program[chain.end].k;

    let mut tail = Tail::default();
    let mut actions = BTreeSet::from([mismatch_action]);
    let plain: Vec<Option<u32>> = (chain.calls.iter())
        .map(|&(_, header)| plain(program, header + 1))
        .collect();
    actions.extend(plain.iter().flatten());
    let rets: BTreeMap<u32, usize> = (actions.into_iter())
        .map(|action| (action, tail.push(ret(action))))
        .collect();
    let mismatch = rets[&mismatch_action];
    let mut calls = Vec::with_capacity(chain.calls.len());
    for (index, &(number, header)) in chain.calls.iter().enumerate() {
        let target = match plain[index] {
            Some(action) => rets[&action],
            None => {
                let body = header + 1..chain.calls.get(index + 1).map_or(chain.end, |call| call.1);
                tail.copy_body(program, body, &chain, mismatch)?
            }
        };
        calls.push((number, target));
    }
    let leaves = leaves(&ranges(&calls, mismatch));
    let root = tail.search(&leaves);
    if root + 1 != tail.program.len() {
        // A single leaf: the search is one jump to it.
        tail.ja(root);
    }

    let length = load + 1 + tail.program.len();
    if length >= MAX_INSNS {
        return Err(format!(
            "{length} instructions: not below BPF_MAXINSNS ({MAX_INSNS})"
        ));
    }
    let mut result = Vec::with_capacity(length);
    result.extend_from_slice(&program[..=load]);
    result.extend(tail.program.into_iter().rev());
    check_jumps(&result)?;
    Ok(result)
}

/// seccompiler's chain: the calls as (number, header position), ascending; the position of
/// the `ret` that ends the chain; and every position on the way there.
struct Chain {
    calls: Vec<(u32, usize)>,
    end: usize,
    path: BTreeSet<usize>,
}

/// Follows the chain from `start` as the kernel does for a number no header matches:
/// each header's `jf` leads to a `ja`, and `ja`s are followed (the skip jumps of a call's
/// further rules) to the next header, and at last to the `ret` that ends the chain.
fn walk_chain(program: &[sock_filter], start: usize) -> Result<Chain, String> {
    let mut calls: Vec<(u32, usize)> = Vec::new();
    let mut path = BTreeSet::new();
    let mut pc = start;
    loop {
        let insn = program.get(pc).ok_or("the chain runs off the program")?;
        path.insert(pc);
        match insn.code {
            RET_K => {
                return Ok(Chain {
                    calls,
                    end: pc,
                    path,
                });
            }
            JMP_JEQ_K if insn.jt == 0 && insn.jf == 1 => {
                let body = program.get(pc + 1).map(|insn| insn.code);
                let next = program.get(pc + 2).map(|insn| insn.code);
                if body != Some(JMP_JA) || next != Some(JMP_JA) {
                    return Err(format!("the header at {pc} is not followed by two `ja`s"));
                }
                if let Some(&(last, _)) = calls.last()
                    && last >= insn.k
                {
                    return Err(format!("call {} after call {last}: not ascending", insn.k));
                }
                calls.push((insn.k, pc));
                pc += 2;
                while program[pc].code == JMP_JA {
                    path.insert(pc);
                    pc = jump(pc, program[pc].k).ok_or("a `ja` overflows")?;
                    if pc >= program.len() {
                        return Err("a `ja` leaves the program".into());
                    }
                }
            }
            code => {
                return Err(format!(
                    "unexpected instruction {code:#06x} (jt {}, jf {}) at {pc} in the chain",
                    insn.jt, insn.jf
                ));
            }
        }
    }
}

/// The action of a body that checks no argument: `ja`s from `entry` to a `ret`.
fn plain(program: &[sock_filter], entry: usize) -> Option<u32> {
    let mut pc = entry;
    loop {
        let insn = program.get(pc)?;
        match insn.code {
            RET_K => return Some(insn.k),
            JMP_JA => pc = jump(pc, insn.k)?,
            _ => return None,
        }
    }
}

/// Splits all numbers into ranges with one target each, as (first number, target): a range
/// lasts until the next one's first number.
fn ranges(calls: &[(u32, usize)], mismatch: usize) -> Vec<(u32, usize)> {
    let mut ranges: Vec<(u32, usize)> = Vec::new();
    let mut add = |first: u64, target| {
        if ranges.last().is_none_or(|&(_, last)| last != target) {
            ranges.push((first as u32, target));
        }
    };
    // The first number not yet in a range.
    let mut next = 0u64;
    for &(number, target) in calls {
        if u64::from(number) > next {
            add(next, mismatch);
        }
        add(u64::from(number), target);
        next = u64::from(number) + 1;
    }
    if next <= u64::from(u32::MAX) {
        add(next, mismatch);
    }
    ranges
}

/// A leaf of the search: the numbers from `first` to the next leaf's first go to `target`,
/// except the one of `exception`.
struct Leaf {
    first: u32,
    target: usize,
    exception: Option<(u32, usize)>,
}

/// Leaves for `ranges`, a single number between two ranges with the same target folded into
/// one leaf with it as the exception.
fn leaves(ranges: &[(u32, usize)]) -> Vec<Leaf> {
    let mut leaves = Vec::new();
    let mut rest = ranges;
    while let [(first, target), ref more @ ..] = *rest {
        let (exception, next) = match *more {
            [(one, inner), (after, outer), ref further @ ..]
                if u64::from(one) + 1 == u64::from(after) && outer == target =>
            {
                (Some((one, inner)), further)
            }
            _ => (None, more),
        };
        leaves.push(Leaf {
            first,
            target,
            exception,
        });
        rest = next;
    }
    leaves
}

/// The program after `ld nr`, built from its end backwards: positions count from the end
/// (0 is the last instruction), so that everything pushed so far keeps its position.
#[derive(Default)]
struct Tail {
    program: Vec<sock_filter>,
    /// The nearest `ja` to each target that has one.
    trampolines: BTreeMap<usize, usize>,
}

impl Tail {
    /// Pushes `insn` in front of everything so far; returns its position.
    fn push(&mut self, insn: sock_filter) -> usize {
        self.program.push(insn);
        self.program.len() - 1
    }

    /// The offset from the next instruction pushed to `target`.
    fn offset(&self, target: usize) -> usize {
        self.program.len() - target - 1
    }

    fn ja(&mut self, target: usize) -> usize {
        self.push(ja(self.offset(target)))
    }

    /// Pushes `code k`, to `yes` or `no`, through a `ja` for a target jt or jf cannot reach.
    fn branch(&mut self, code: u16, k: u32, yes: usize, no: usize) -> usize {
        let (mut jt, mut jf) = (yes, no);
        loop {
            if self.offset(jf) > MAX_SHORT {
                jf = self.trampoline(no);
            } else if self.offset(jt) > MAX_SHORT {
                jt = self.trampoline(yes);
            } else {
                break;
            }
        }
        let (jt, jf) = (self.offset(jt) as u8, self.offset(jf) as u8);
        self.push(sock_filter { code, jt, jf, k })
    }

    /// A `ja` to `target` within reach: the nearest one so far, or a new one.
    fn trampoline(&mut self, target: usize) -> usize {
        match self.trampolines.get(&target) {
            Some(&at) if self.offset(at) <= MAX_SHORT => at,
            _ => {
                let at = self.ja(target);
                self.trampolines.insert(target, at);
                at
            }
        }
    }

    /// Pushes the search over `leaves`: the upper half first, so that it ends up after the
    /// lower half, which follows its node directly. Returns where the search starts.
    fn search(&mut self, leaves: &[Leaf]) -> usize {
        match leaves {
            [] => unreachable!("ranges cover every number"),
            [leaf] => match leaf.exception {
                None => leaf.target,
                Some((number, to)) => self.branch(JMP_JEQ_K, number, to, leaf.target),
            },
            _ => {
                let (low, high) = leaves.split_at(leaves.len() / 2);
                let high_start = self.search(high);
                let low_start = self.search(low);
                self.branch(JMP_JGE_K, high[0].first, high_start, low_start)
            }
        }
    }

    /// Copies `body` of `program`, its jumps inside it as they are, its jumps out (onto the
    /// chain's path, see the top of the file) to `mismatch`. Returns where the copy starts.
    fn copy_body(
        &mut self,
        program: &[sock_filter],
        body: Range<usize>,
        chain: &Chain,
        mismatch: usize,
    ) -> Result<usize, String> {
        // The copy of instruction `index` will be at `last - index`.
        let last = self.program.len() + body.end - 1;
        // Per instruction: None where no run from the start gets, else whether A may have
        // changed on the way.
        let mut runs = vec![None; body.len()];
        runs[0] = Some(false);
        let mut copy = Vec::with_capacity(body.len());
        for index in body.clone() {
            let run = runs[index - body.start];
            // The offset in the copy of a jump by `offset`.
            let mut follow = |offset: usize| {
                let target = index + 1 + offset;
                if target < body.end {
                    if let Some(changed) = run {
                        let slot: &mut Option<bool> = &mut runs[target - body.start];
                        *slot = Some(slot.unwrap_or(false) || changed);
                    }
                    Ok(offset)
                } else if !chain.path.contains(&target) {
                    Err(format!(
                        "instruction {index} jumps out of its body, to {target}"
                    ))
                } else if run == Some(true) && target != chain.end {
                    Err(format!(
                        "instruction {index} leaves its body for {target} with A no longer the number"
                    ))
                } else {
                    Ok(last - index - mismatch - 1)
                }
            };
            let short = |offset: usize| {
                u8::try_from(offset).map_err(|_| format!("instruction {index}: out of reach"))
            };
            let mut insn = program[index].clone();
            if insn.code == JMP_JA {
                insn.k = follow(insn.k as usize)?
                    .try_into()
                    .expect("a program shorter than BPF_MAXINSNS");
            } else if insn.code & CLASS_MASK == CLASS_JMP {
                insn.jt = short(follow(insn.jt.into())?)?;
                insn.jf = short(follow(insn.jf.into())?)?;
            } else if insn.code & CLASS_MASK != CLASS_RET && run.is_some() {
                // Anything else (a load, arithmetic) may change A and goes on to the next.
                if index + 1 == body.end {
                    return Err(format!("instruction {index} falls off its body"));
                }
                runs[index + 1 - body.start] = Some(true);
            }
            copy.push(insn);
        }
        self.program.extend(copy.into_iter().rev());
        Ok(self.program.len() - 1)
    }
}

/// Checks that every jump lands inside the program, as the kernel's checker does.
fn check_jumps(program: &[sock_filter]) -> Result<(), String> {
    for index in 0..program.len() {
        if let Some(targets) = jump_targets(program, index)
            && let Some(target) = targets.iter().find(|&&target| target >= program.len())
        {
            return Err(format!(
                "instruction {index} jumps out of the program, to {target}"
            ));
        }
    }
    Ok(())
}

/// Where the jump at `index` may go: None for an instruction that is not a jump.
fn jump_targets(program: &[sock_filter], index: usize) -> Option<[usize; 2]> {
    let insn = &program[index];
    if insn.code & CLASS_MASK != CLASS_JMP {
        return None;
    }
    Some(if insn.code == JMP_JA {
        let target = jump(index, insn.k).unwrap_or(usize::MAX);
        [target, target]
    } else {
        [index + 1 + insn.jt as usize, index + 1 + insn.jf as usize]
    })
}

fn jump(from: usize, offset: u32) -> Option<usize> {
    from.checked_add(1)?
        .checked_add(usize::try_from(offset).ok()?)
}

fn ja(offset: usize) -> sock_filter {
    sock_filter {
        code: JMP_JA,
        jt: 0,
        jf: 0,
        k: u32::try_from(offset).expect("a program shorter than BPF_MAXINSNS"),
    }
}

fn ret(action: u32) -> sock_filter {
    sock_filter {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: action,
    }
}
