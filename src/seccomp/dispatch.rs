//! A binary-search dispatcher in front of seccompiler's linear chain.
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
//! and, after the last block, the filter's mismatch action (`ret`). A call is thus matched
//! after walking on average half the chain, at run time for calls the kernel does not cache
//! (those with argument checks) and at attach time, when the kernel emulates the filter for
//! every system call number to fill its action cache.
//!
//! [`add_dispatcher`] walks the chain exactly as the kernel would for a call that matches no
//! header, recording each header's number and position, and inserts after `ld nr` a binary
//! search on the number (`jge` nodes, buckets of up to [`BUCKET`] `jeq` leaves) that jumps
//! straight to the call's own header, which then matches, or to the chain's end. Nothing of
//! the chain changes: its jumps are relative and all of them lie after the insertion point.
//!
//! Any program that does not have this shape is left as it is. This file is also compiled
//! into build.rs, which precompiles the built-in profiles; it depends on seccompiler only.

use seccompiler::sock_filter;

const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
/// BPF_CLASS(code) == BPF_JMP.
const CLASS_MASK: u16 = 0x07;
const CLASS_JMP: u16 = 0x05;
/// `offsetof(struct seccomp_data, nr)`.
const NR_OFFSET: u32 = 0;
/// The kernel's BPF_MAXINSNS; the result stays below it, as seccompiler's programs do.
const MAX_INSNS: usize = 4096;
/// Most `jeq`s in a leaf of the search tree.
pub const BUCKET: usize = 4;
/// The longest conditional jump (jt and jf are 8-bit).
const MAX_SHORT: usize = u8::MAX as usize;

/// `program` with a dispatcher, or `program` itself where [`add_dispatcher`] declines.
pub fn optimize(program: &[sock_filter]) -> Vec<sock_filter> {
    add_dispatcher(program).unwrap_or_else(|_| program.to_vec())
}

/// `program` with a binary-search dispatcher after `ld nr`; the error says why the program
/// is better left alone (an unexpected shape, too few calls to gain anything, too long).
pub fn add_dispatcher(program: &[sock_filter]) -> Result<Vec<sock_filter>, String> {
    check_jumps(program)?;
    let load = program
        .iter()
        .position(|insn| insn.code == LD_W_ABS && insn.k == NR_OFFSET)
        .ok_or("no `ld nr`")?;
    let insert = load + 1;
    // The prologue (the arch check) must not jump past `ld nr`: such a jump would land in
    // the dispatcher instead of where it meant to go.
    for index in 0..insert {
        if let Some(targets) = jump_targets(program, index)
            && targets.iter().any(|&target| target > load)
        {
            return Err(format!("instruction {index} jumps past `ld nr`"));
        }
    }
    let (calls, end) = walk_chain(program, insert)?;
    if calls.len() <= BUCKET {
        return Err(format!(
            "only {} calls: a chain this short is fast",
            calls.len()
        ));
    }

    let mut tree = Vec::new();
    emit(&calls, end, &mut tree);
    let length = tree.len();
    if program.len() + length >= MAX_INSNS {
        return Err(format!(
            "{} instructions with the dispatcher: not below BPF_MAXINSNS ({MAX_INSNS})",
            program.len() + length
        ));
    }
    let mut result = Vec::with_capacity(program.len() + length);
    result.extend_from_slice(&program[..insert]);
    for (index, node) in tree.into_iter().enumerate() {
        result.push(match node {
            Node::Insn(insn) => insn,
            // The chain moves down by `length`; all of it lies after this jump.
            Node::ToChain(target) => ja(target + length - (insert + index + 1)),
        });
    }
    result.extend_from_slice(&program[insert..]);
    check_jumps(&result)?;
    Ok(result)
}

/// Follows the chain from `start` as the kernel does for a number no header matches:
/// each header's `jf` leads to a `ja`, and `ja`s are followed (the skip jumps of a call's
/// further rules) to the next header. Returns (number, header position) of every call, in
/// chain order, and the position of the `ret` that ends the chain.
fn walk_chain(program: &[sock_filter], start: usize) -> Result<(Vec<(u32, usize)>, usize), String> {
    let mut calls: Vec<(u32, usize)> = Vec::new();
    let mut pc = start;
    loop {
        let insn = program.get(pc).ok_or("the chain runs off the program")?;
        match insn.code {
            RET_K => return Ok((calls, pc)),
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

/// One instruction of the dispatcher; `ToChain` is a `ja` to a position in the original
/// program, resolved once the dispatcher's length is known.
enum Node {
    Insn(sock_filter),
    ToChain(usize),
}

/// Emits the search over `calls` (ascending), whose misses go to `end`.
fn emit(calls: &[(u32, usize)], end: usize, out: &mut Vec<Node>) {
    if calls.len() <= BUCKET {
        // The leaf: `jeq NR; ja HEADER` per call, then `ja END`.
        for &(number, header) in calls {
            out.push(Node::Insn(jeq(number, 0, 1)));
            out.push(Node::ToChain(header));
        }
        out.push(Node::ToChain(end));
        return;
    }
    let (low, high) = calls.split_at(calls.len() / 2);
    let mut left = Vec::new();
    emit(low, end, &mut left);
    if left.len() <= MAX_SHORT {
        // `jge PIVOT` jumps over the lower half to the upper one.
        out.push(Node::Insn(jge(high[0].0, left.len() as u8, 0)));
    } else {
        // Too far for jt: the upper half through a trampoline.
        out.push(Node::Insn(jge(high[0].0, 0, 1)));
        out.push(Node::Insn(ja(left.len())));
    }
    out.append(&mut left);
    emit(high, end, out);
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

fn jeq(k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: JMP_JEQ_K,
        jt,
        jf,
        k,
    }
}

fn jge(k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: JMP_JGE_K,
        jt,
        jf,
        k,
    }
}
