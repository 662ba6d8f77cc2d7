/* The sizes and offsets of libfabric's structs as the installed headers define them, in the
 * order src/abi.rs's test lists its own: the check that the hand-declared structs match. */
#include <stddef.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

const size_t reverb_fi_layout[] = {
	sizeof(struct fi_provider),
	offsetof(struct fi_provider, getinfo),
	sizeof(struct fi_tx_attr),
	sizeof(struct fi_rx_attr),
	sizeof(struct fi_ep_attr),
	offsetof(struct fi_ep_attr, mem_tag_format),
	sizeof(struct fi_domain_attr),
	offsetof(struct fi_domain_attr, mr_key_size),
	offsetof(struct fi_domain_attr, caps),
	offsetof(struct fi_domain_attr, tclass),
	sizeof(struct fi_fabric_attr),
	sizeof(struct fi_info),
	offsetof(struct fi_info, src_addrlen),
	offsetof(struct fi_info, nic),
	sizeof(struct fid),
	sizeof(struct fi_ops),
	sizeof(struct fi_ops_fabric),
	sizeof(struct fid_fabric),
	sizeof(struct fi_ops_domain),
	sizeof(struct fid_domain),
	sizeof(struct fi_ops_mr),
	sizeof(struct fi_eq_attr),
	sizeof(struct fi_ops_eq),
	sizeof(struct fi_av_attr),
	offsetof(struct fi_av_attr, flags),
	sizeof(struct fi_ops_av),
	sizeof(struct fi_cq_attr),
	offsetof(struct fi_cq_attr, wait_set),
	sizeof(struct fi_cq_tagged_entry),
	sizeof(struct fi_cq_err_entry),
	offsetof(struct fi_cq_err_entry, err),
	offsetof(struct fi_cq_err_entry, err_data_size),
	sizeof(struct fi_ops_cq),
	sizeof(struct fi_cntr_attr),
	offsetof(struct fi_cntr_attr, flags),
	sizeof(struct fi_ops_cntr),
	offsetof(struct fi_ops_cntr, seterr),
	sizeof(struct fid_cntr),
	sizeof(struct fi_msg),
	sizeof(struct fi_msg_tagged),
	offsetof(struct fi_msg_tagged, context),
	sizeof(struct fi_ops_ep),
	sizeof(struct fi_ops_cm),
	offsetof(struct fi_ops_cm, getname),
	sizeof(struct fi_ops_msg),
	offsetof(struct fi_ops_msg, injectdata),
	sizeof(struct fi_ops_tagged),
	offsetof(struct fi_ops_tagged, inject),
	sizeof(struct fid_ep),
	offsetof(struct fid_ep, tagged),
	sizeof(struct fi_context),
	sizeof(struct fid_mr),
	sizeof(struct fi_mr_attr),
	offsetof(struct fi_mr_attr, iface),
	sizeof(struct fi_rma_iov),
	sizeof(struct fi_msg_rma),
	sizeof(struct fi_ops_rma),
	offsetof(struct fi_ops_rma, injectdata),
};
