//! `with_memory_budget` under `BudgetedAlloc`: work within its budget returns its value (what it
//! frees is given back), work past it is stopped and reported instead of the process aborting.

use tessera_kernels::{with_memory_budget, BudgetError, BudgetedAlloc};

#[global_allocator]
static ALLOC: BudgetedAlloc = BudgetedAlloc;

#[test]
fn work_within_its_budget_returns_and_work_past_it_is_stopped() {
    assert_eq!(with_memory_budget(1 << 20, || vec![7u8; 1000].len()), Ok(1000));
    // 400 MiB allocated in all, 4 MiB at a time: the frees are refunded.
    let total = with_memory_budget(8 << 20, || (0..100).map(|_| std::hint::black_box(vec![1u8; 4 << 20]).len()).sum());
    assert_eq!(total, Ok(400usize << 20));
    // A string that doubles 40 times (2^40 bytes) stops at the budget.
    let doubled = with_memory_budget(64 << 20, || {
        let mut s = String::from("x");
        for _ in 0..40 {
            s = s.repeat(2);
        }
        s.len()
    });
    assert_eq!(doubled, Err(BudgetError::Exhausted));
    assert_eq!(with_memory_budget(1 << 20, || -> usize { panic!("the work panics") }), Err(BudgetError::Failed));
    // The calling thread has no budget.
    let big = std::hint::black_box(vec![0u8; 128 << 20]);
    assert_eq!(big.len(), 128 << 20);
}

#[test]
fn the_budgeted_allocator_knows_it_is_installed() {
    assert!(tessera_kernels::budgets_enforced());
}
