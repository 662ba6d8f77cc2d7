! reverb's checkpoint calls (mpix_reverb.h) for Fortran programs: compile this module with
! the program (mpif90.mpich mpix_reverb.f90 prog.f90). The C header declares them weak, so one
! binary runs on any MPI; Fortran has no weak symbols, so here each call is looked up when it
! is made (dlsym in the process's libraries): on another MPI, mpix_reverb_available() is false.
!
!   if (mpix_reverb_available()) then
!     ierr = mpix_reverb_protect(c_loc(state), c_sizeof(state))  ! what a checkpoint holds
!     ierr = mpix_reverb_restore(restored)                       ! written back after a restart
!   end if
!   ...
!   ierr = mpix_reverb_checkpoint()                              ! collective, end of an iteration
module mpix_reverb
  use iso_c_binding, only: c_associated, c_char, c_f_procpointer, c_funptr, c_int, c_long, &
                           c_null_char, c_null_ptr, c_ptr
  implicit none
  private
  public :: mpix_reverb_available, mpix_reverb_protect, mpix_reverb_restore, &
            mpix_reverb_checkpoint, mpix_reverb_restarted

  abstract interface
    integer(c_int) function protect_fn(ptr, bytes) bind(C)
      import :: c_int, c_long, c_ptr
      type(c_ptr), value :: ptr
      integer(c_long), value :: bytes
    end function protect_fn
    integer(c_int) function flag_fn(flag) bind(C)
      import :: c_int
      integer(c_int) :: flag
    end function flag_fn
    integer(c_int) function checkpoint_fn() bind(C)
      import :: c_int
    end function checkpoint_fn
  end interface

  interface
    ! glibc's dlsym; a null handle is RTLD_DEFAULT (every library loaded, in order).
    type(c_funptr) function dlsym(handle, symbol) bind(C, name='dlsym')
      import :: c_char, c_funptr, c_ptr
      type(c_ptr), value :: handle
      character(kind=c_char) :: symbol(*)
    end function dlsym
  end interface

contains

  type(c_funptr) function lookup(name)
    character(len=*), intent(in) :: name
    lookup = dlsym(c_null_ptr, name // c_null_char)
  end function lookup

  ! .true. when the program runs on reverb's MPI library, where the calls below exist.
  logical function mpix_reverb_available()
    mpix_reverb_available = c_associated(lookup('MPIX_Reverb_checkpoint'))
  end function mpix_reverb_available

  ! Registers `bytes` bytes at `ptr` (c_loc of a TARGET variable) as checkpointed state.
  integer function mpix_reverb_protect(ptr, bytes)
    type(c_ptr), intent(in) :: ptr
    integer(c_long), intent(in) :: bytes
    procedure(protect_fn), pointer :: f
    call c_f_procpointer(lookup('MPIX_Reverb_protect'), f)
    mpix_reverb_protect = f(ptr, bytes)
  end function mpix_reverb_protect

  ! After a restart, writes the last checkpoint back into the protected state; `restored`
  ! says whether it did.
  integer function mpix_reverb_restore(restored)
    integer, intent(out) :: restored
    procedure(flag_fn), pointer :: f
    integer(c_int) :: flag
    call c_f_procpointer(lookup('MPIX_Reverb_restore'), f)
    mpix_reverb_restore = f(flag)
    restored = flag
  end function mpix_reverb_restore

  ! Whether this process is a restarted incarnation.
  integer function mpix_reverb_restarted(restarted)
    integer, intent(out) :: restarted
    procedure(flag_fn), pointer :: f
    integer(c_int) :: flag
    call c_f_procpointer(lookup('MPIX_Reverb_restarted'), f)
    mpix_reverb_restarted = f(flag)
    restarted = flag
  end function mpix_reverb_restarted

  ! Checkpoints the protected state of every rank (collective over MPI_COMM_WORLD).
  integer function mpix_reverb_checkpoint()
    procedure(checkpoint_fn), pointer :: f
    call c_f_procpointer(lookup('MPIX_Reverb_checkpoint'), f)
    mpix_reverb_checkpoint = f()
  end function mpix_reverb_checkpoint

end module mpix_reverb
