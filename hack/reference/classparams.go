package main

import (
	"errors"

	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/classparams"
	"github.com/gcsfuse-csi/gcsfuse-csi/pkg/contract"
)

// ---- StorageClass parameters ----------------------------------------------------------

func (g *gen) classParams() error {
	g.p("")
	g.p("## StorageClass parameters")
	g.p("")
	g.p("A StorageClass whose `provisioner` is the driver's name gives every claim a directory of")
	g.p("its own in its bucket, mounted with `only-dir`. Its parameters are the volume attributes")
	g.p("above (`" + contract.AttrBucketName + "` required; the column \"as a StorageClass parameter\"), and:")
	g.p("")
	g.header("parameter", "example", "the code reads it as")
	volume := "pvc-0123"
	for _, c := range []struct{ shown, key, value string }{
		{classparams.ParamPathPrefix, classparams.ParamPathPrefix, "claims/team-a"},
		{classparams.ParamPathPrefix, classparams.ParamPathPrefix, "claims/../x"},
		{classparams.ReservedParamPrefix + "*", classparams.ReservedParamPrefix + "provisioner-secret-name", "gcs-key"},
	} {
		params := map[string]string{contract.AttrBucketName: bucket, c.key: c.value}
		cl, err := classparams.Parse(params)
		read := ""
		if err != nil {
			read = refused(err)
		} else {
			read = "the volume " + code(volume) + " gets " + code(contract.AttrMountOptions+": "+cl.VolumeAttributes(cl.Dir(volume))[contract.AttrMountOptions])
		}
		g.row(code(c.shown), code(c.key+": "+c.value), read)
	}
	_, err := classparams.Parse(map[string]string{classparams.ParamPathPrefix: "claims"})
	if err == nil {
		return errors.New("classparams.Parse accepted a class without " + contract.AttrBucketName)
	}
	g.p("")
	g.p("Without `" + contract.AttrBucketName + "`: " + refused(err) + ".")
	return nil
}
