/* Gather and Scatter, and Scatterv, move each site's run of blocks
   (packed bytes) between the root and every other site's leader in one
   step: one WAN latency, each block across the WAN once.  Runs and blocks
   are size_t bytes; a message carries at most QCG_PIECE of them (an int
   count), so a larger one goes as several, matched in order. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "coll_qcg.h"

#include "ompi/mca/pml/pml.h"
#include "ompi/request/request.h"
#include "opal/datatype/opal_convertor.h"

#define QCG_PIECE ((size_t)1 << 30)

size_t coll_qcg_block_bytes(int count, ompi_datatype_t *dtype, int size)
{
    size_t tsize = 0;

    ompi_datatype_type_size(dtype, &tsize);
    if (count <= 0 || tsize == 0 || tsize * (size_t)count * (size_t)size > INT_MAX)
        return 0;
    return tsize * (size_t)count;
}

size_t coll_qcg_data_bytes(int count, ompi_datatype_t *dtype)
{
    size_t tsize = 0;

    ompi_datatype_type_size(dtype, &tsize);
    return count > 0 ? tsize * (size_t)count : 0;
}

/* Through Open MPI's convertor: MPI_Pack's int position would limit a
   v-variant's blocks to 2 GiB. */
static int convert(void *buf, int count, ompi_datatype_t *dtype, char *packed, size_t bytes,
                   int packing)
{
    opal_convertor_t conv;
    struct iovec iov = {.iov_base = packed, .iov_len = bytes};
    uint32_t iovs = 1;
    size_t done = bytes;
    int rc;

    if (bytes == 0)
        return OMPI_SUCCESS;
    OBJ_CONSTRUCT(&conv, opal_convertor_t);
    if (packing)
        rc = opal_convertor_copy_and_prepare_for_send(ompi_mpi_local_convertor, &dtype->super,
                                                      (size_t)count, buf, 0, &conv);
    else
        rc = opal_convertor_copy_and_prepare_for_recv(ompi_mpi_local_convertor, &dtype->super,
                                                      (size_t)count, buf, 0, &conv);
    if (rc == OPAL_SUCCESS)
        rc = (packing ? opal_convertor_pack(&conv, &iov, &iovs, &done)
                      : opal_convertor_unpack(&conv, &iov, &iovs, &done)) == 1 &&
                     done == bytes
                 ? OPAL_SUCCESS
                 : OPAL_ERROR;
    OBJ_DESTRUCT(&conv);
    return rc == OPAL_SUCCESS ? OMPI_SUCCESS : OMPI_ERROR;
}

int coll_qcg_pack(const void *buf, int count, ompi_datatype_t *dtype, char *out, size_t bytes)
{
    return convert((void *)(uintptr_t)buf, count, dtype, out, bytes, 1);
}

int coll_qcg_unpack(const char *in, size_t bytes, void *buf, int count, ompi_datatype_t *dtype)
{
    return convert(buf, count, dtype, (char *)(uintptr_t)in, bytes, 0);
}

size_t coll_qcg_pieces(size_t bytes)
{
    return (bytes + QCG_PIECE - 1) / QCG_PIECE;
}

int coll_qcg_post(char *p, size_t bytes, int peer, int tag, ompi_communicator_t *comm, int sending,
                  ompi_request_t **reqs, int *k)
{
    int rc = OMPI_SUCCESS;

    for (size_t at = 0; rc == OMPI_SUCCESS && at < bytes; at += QCG_PIECE) {
        int n = (int)(bytes - at < QCG_PIECE ? bytes - at : QCG_PIECE);

        if (sending)
            rc = MCA_PML_CALL(isend(p + at, n, MPI_BYTE, peer, tag, MCA_PML_BASE_SEND_STANDARD,
                                    comm, &reqs[(*k)++]));
        else
            rc = MCA_PML_CALL(irecv(p + at, n, MPI_BYTE, peer, tag, comm, &reqs[(*k)++]));
    }
    return rc;
}

int coll_qcg_runs_alloc(coll_qcg_module_t *m, int rank, int root, size_t bytes, int size,
                        struct coll_qcg_runs *b)
{
    int site = m->site_of[rank];

    b->n = m->site_start[site + 1] - m->site_start[site];
    b->local_root = site == m->site_of[root] ? m->local_rank[root] : 0;
    b->collector = m->local_rank[rank] == b->local_root;
    b->base = malloc(rank == root   ? (size_t)size * bytes
                     : b->collector ? (size_t)b->n * bytes
                                    : bytes);
    if (b->base == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    b->run = rank == root ? b->base + (size_t)m->site_start[site] * bytes : b->base;
    b->mine = b->collector ? b->run + (size_t)m->local_rank[rank] * bytes : b->base;
    return OMPI_SUCCESS;
}

/* Where the block at site position pos starts in all: off[pos], or pos
   blocks of bytes when every block has the same size (off NULL). */
static size_t at(const size_t *off, size_t bytes, int pos)
{
    return off != NULL ? off[pos] : (size_t)pos * bytes;
}

int coll_qcg_root_runs(coll_qcg_module_t *m, char *all, const size_t *off, size_t bytes, int root,
                       ompi_communicator_t *comm, int tag, int sending)
{
    ompi_request_t **reqs;
    int k = 0, rc = OMPI_SUCCESS;
    size_t pieces = 0;

    for (int s = 0; s < m->sites; s++)
        pieces += coll_qcg_pieces(at(off, bytes, m->site_start[s + 1]) -
                                  at(off, bytes, m->site_start[s]));
    reqs = malloc((pieces > 0 ? pieces : 1) * sizeof(*reqs));
    if (reqs == NULL)
        return OMPI_ERR_OUT_OF_RESOURCE;
    for (int s = 0; rc == OMPI_SUCCESS && s < m->sites; s++) {
        size_t from = at(off, bytes, m->site_start[s]);

        if (s != m->site_of[root])
            rc = coll_qcg_post(all + from, at(off, bytes, m->site_start[s + 1]) - from,
                               m->leader[s], tag, comm, sending, reqs, &k);
    }
    /* Also after a failure to post more: none may outlive the buffer. */
    return coll_qcg_finish(reqs, k, rc);
}
