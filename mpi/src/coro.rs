//! Coroutines for nonblocking collectives: a started collective runs its blocking code on a
//! stack of its own (`corosensei`) and suspends wherever that code would wait for a message;
//! MPI progress resumes it. While a coroutine runs, the library's state is lent to it by its
//! resumer (`call` inside it finds the state here, not in the thread-local it is borrowed
//! from), and no coroutine resumes another.

use std::cell::Cell;
use std::ffi::c_int;
use std::ptr;

use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::state::State;

/// Each coroutine's stack: the blocking collectives keep their buffers on the heap, but a
/// program's reduction function or attribute callback runs on it too. Reserved, not touched:
/// pages are committed as used.
const STACK_BYTES: usize = 1 << 20;
/// Finished tasks' stacks kept for the next ones (a program looping on nonblocking
/// collectives maps none after the first few).
const POOLED_STACKS: usize = 16;

type Yields = Yielder<(), *mut State>;

thread_local! {
    /// The state lent to the running coroutine (null when none runs).
    static LENT: Cell<*mut State> = const { Cell::new(ptr::null_mut()) };
    /// The running coroutine's yielder (null when none runs).
    static YIELDER: Cell<*const Yields> = const { Cell::new(ptr::null()) };
    /// Whether the running coroutine is inside an MPI call already (its state taken).
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
    /// Whether the running coroutine took a message since it was resumed.
    static ADVANCED: Cell<bool> = const { Cell::new(false) };
    static STACKS: std::cell::RefCell<Vec<DefaultStack>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A started collective: its blocking code, suspended or finished.
pub struct Task {
    coro: Option<Coroutine<(), *mut State, c_int, DefaultStack>>,
}

/// What a step of a task came to.
pub enum Step {
    /// It returned this MPI return code.
    Done(c_int),
    /// It suspended; true if it took a message on the way.
    Suspended(bool),
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Task")
    }
}

impl Task {
    /// A task that runs `run` (an MPI call, through `call`) when first stepped.
    pub fn new(run: impl FnOnce() -> c_int + 'static) -> MpiResult<Task> {
        let stack = match STACKS.with(|p| p.borrow_mut().pop()) {
            Some(stack) => stack,
            None => DefaultStack::new(STACK_BYTES).map_err(|e| {
                MpiError::new(MPI_ERR_NO_MEM, format!("a nonblocking collective's stack: {e}"))
            })?,
        };
        let coro = Coroutine::with_stack(stack, move |y: &Yields, ()| {
            YIELDER.with(|c| c.set(y as *const Yields));
            run()
        });
        Ok(Task { coro: Some(coro) })
    }

    /// Runs the task, lent `s`, until it suspends or returns.
    pub fn step(&mut self, s: &mut State) -> Step {
        let Some(coro) = self.coro.as_mut() else { return Step::Done(MPI_SUCCESS) };
        if coro.done() {
            return Step::Done(MPI_SUCCESS);
        }
        LENT.with(|c| c.set(s as *mut State));
        IN_CALL.with(|c| c.set(false));
        ADVANCED.with(|c| c.set(false));
        let result = coro.resume(());
        LENT.with(|c| c.set(ptr::null_mut()));
        YIELDER.with(|c| c.set(ptr::null()));
        IN_CALL.with(|c| c.set(false));
        match result {
            CoroutineResult::Return(rc) => Step::Done(rc),
            CoroutineResult::Yield(_) => Step::Suspended(ADVANCED.with(Cell::get)),
        }
    }
}

impl Drop for Task {
    /// A finished task's stack goes back to the pool. One dropped unfinished (the job ends
    /// with it pending) is leaked, stack and all: unwinding it would run its code outside any
    /// resume.
    fn drop(&mut self) {
        let Some(coro) = self.coro.take() else { return };
        if !coro.done() {
            std::mem::forget(coro);
            return;
        }
        let stack = coro.into_stack();
        // Not once the thread's pool is gone (a task dropped with the thread's state).
        let _ = STACKS.try_with(|p| {
            if let Ok(mut pool) = p.try_borrow_mut() {
                if pool.len() < POOLED_STACKS {
                    pool.push(stack);
                }
            }
        });
    }
}

/// Whether the caller runs inside a task.
pub fn in_task() -> bool {
    YIELDER.with(|c| !c.get().is_null())
}

/// Inside a task: runs `body` on the state lent to it (None outside a task). A second MPI
/// call from inside the first (a program's callback) gets an error, as outside tasks.
pub fn with_lent<R>(body: impl FnOnce(&mut State) -> R) -> Option<Result<R, ()>> {
    if !in_task() {
        return None;
    }
    if IN_CALL.with(|c| c.replace(true)) {
        return Some(Err(()));
    }
    let p = LENT.with(Cell::get);
    // SAFETY: a task runs only inside `Task::step`, which lent it the library's state (at its
    // fixed place in the thread-local, for as long as MPI is initialized) and does not touch
    // it until the task suspends; IN_CALL makes this the only reference the task takes.
    let r = body(unsafe { &mut *p });
    IN_CALL.with(|c| c.set(false));
    Some(Ok(r))
}

/// Marks that the running task took a message (progress, for its waiter's bound).
pub fn advanced() {
    ADVANCED.with(|c| c.set(true));
}

/// Suspends the running task until progress resumes it; `s` is its state, handed across
/// the switch so that the compiler takes it as read and written meanwhile. An error outside
/// a task.
pub fn suspend(s: &mut State) -> MpiResult<()> {
    let y = YIELDER.with(Cell::get);
    if y.is_null() {
        return Err(MpiError::new(MPI_ERR_INTERN, "a collective suspended outside a coroutine"));
    }
    // SAFETY: YIELDER is the running coroutine's own, set by its body and valid while it runs
    // (this call is on its stack).
    let yielder = unsafe { &*y };
    let _: () = yielder.suspend(std::hint::black_box(s as *mut State));
    // Resumed by `Task::step`, which cleared these at the last suspension.
    YIELDER.with(|c| c.set(y));
    IN_CALL.with(|c| c.set(true));
    Ok(())
}
