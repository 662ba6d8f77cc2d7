/* The C half of fortran.f90 (linked into it, called through bind(C) interfaces): what C code
 * in a Fortran program sees of Fortran's MPI objects. MPI 4.0, 19.3: an attribute set from
 * Fortran reads in C as a pointer to the integer; a Fortran status converts with
 * MPI_Status_f2c / MPI_Status_c2f; Fortran's MPI_STATUS_IGNORE is MPI_F_STATUS_IGNORE in C. */
#include <mpi.h>
#include <stddef.h>

/* The attribute as MPI_Comm_set_attr from Fortran set it (INTEGER(KIND=MPI_ADDRESS_KIND)). */
int c_attr_aint(MPI_Fint comm, MPI_Fint keyval) {
    void *value = NULL;
    int flag = 0;
    if (MPI_Comm_get_attr(MPI_Comm_f2c(comm), keyval, &value, &flag) != MPI_SUCCESS || !flag) return -1;
    return (int)*(MPI_Aint *)value;
}

/* The attribute as MPI_Attr_put from Fortran set it (INTEGER). */
int c_attr_int(MPI_Fint comm, MPI_Fint keyval) {
    void *value = NULL;
    int flag = 0;
    if (MPI_Comm_get_attr(MPI_Comm_f2c(comm), keyval, &value, &flag) != MPI_SUCCESS || !flag) return -1;
    return (int)*(MPI_Fint *)value;
}

/* The status's source through MPI_Status_f2c, after checking MPI_Status_c2f gives the Fortran
 * status back and MPI_Get_count reads 2 integers from the C one; negative on a mismatch. */
int c_status_source(const MPI_Fint *f_status) {
    MPI_Status c;
    MPI_Fint back[MPI_F_STATUS_SIZE];
    int count = -1;
    if (MPI_Status_f2c(f_status, &c) != MPI_SUCCESS) return -1;
    if (MPI_Status_c2f(&c, back) != MPI_SUCCESS) return -2;
    for (int i = 0; i < MPI_F_STATUS_SIZE; i++)
        if (back[i] != f_status[i]) return -3;
    MPI_Get_count(&c, MPI_INT, &count);
    if (count != 2) return -4;
    return c.MPI_SOURCE;
}

/* 1 when `f_status` is Fortran's MPI_STATUS_IGNORE as C knows it. */
int c_is_status_ignore(const MPI_Fint *f_status) {
    return MPI_F_STATUS_IGNORE != NULL && f_status == MPI_F_STATUS_IGNORE;
}
